"""The process id the per-step paths read without a system call is the forked child's in the child:
an owner token naming the parent would let a child's claim pass for its parent's, and a kept
connection checked against the parent's id would be shared across the fork."""

from __future__ import annotations

import os

import pytest

from saga_worker.core import process_id
from saga_worker.core.leases import new_owner


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_reads_its_own_id_and_puts_it_in_its_owner_tokens() -> None:
    parent = os.getpid()
    assert process_id.current() == parent
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        try:
            os.close(read)
            me = os.getpid()
            owner_pid = int(new_owner().split(":")[1])
            os.write(write, f"{process_id.current()} {owner_pid} {me}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen, in_owner, child_pid = (int(v) for v in pipe.read().split())
    os.waitpid(child, 0)
    assert seen == child_pid == in_owner == child != parent
    assert process_id.current() == parent
