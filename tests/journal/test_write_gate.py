"""The SQLite journal's write gate (``journal/write_gate.py``): a write transaction holds a file lock
next to the database from before ``BEGIN`` until it has committed, so the journal's writers queue in
the kernel instead of sleeping in SQLite's busy handler; and a writer that dies inside its
transaction leaves the gate free for the next, as it leaves SQLite's own lock."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_worker import Journal, open_journal
from saga_worker.core import faults
from saga_worker.journal.records import ClaimStatus, FinishedClaim


@pytest.fixture
def journal(sqlite_url: str) -> Iterator[Journal]:
    with open_journal(sqlite_url, migrate=True) as opened:
        yield opened


def _gate_path(url: str) -> str:
    return url.removeprefix("sqlite:///") + ".write-gate"


def _gate_is_free(url: str) -> bool:
    """Whether another open file of the gate can take it right now (without waiting)."""
    fd = os.open(_gate_path(url), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops a lock taken here
    return True


def _claim(journal: Journal, run_id: str, suffix: str) -> None:
    got = journal.claim_compensation(
        run_id, suffix, via_run_id=run_id, owner="me", ttl=30.0, idempotency_key=f"{run_id}:comp:{suffix}"
    )
    assert got is not None and got.acquired


def _finish_and_claim_next(journal: Journal, run_id: str) -> object:
    return journal.finish_and_claim(
        FinishedClaim(run_id, "call-2", "me", ClaimStatus.COMPENSATED),
        run_id,
        "call-1",
        via_run_id=run_id,
        owner="me",
        ttl=30.0,
        idempotency_key=f"{run_id}:comp:call-1",
    )


def test_a_write_holds_the_gate_from_before_its_transaction_until_it_commits(
    journal: Journal, run_id: str
) -> None:
    _claim(journal, run_id, "call-2")
    inside: list[bool] = []
    faults.enable()
    try:
        with faults.calling("before_next_claim", lambda *_: inside.append(_gate_is_free(journal.url))):
            assert _finish_and_claim_next(journal, run_id) is not None
    finally:
        faults.disable()

    assert inside == [False]  # held while the transaction was open
    assert _gate_is_free(journal.url)  # and let go once it committed
    done = journal.get_claim(run_id, "call-2")
    assert done is not None and done.status is ClaimStatus.COMPENSATED


def test_a_writer_killed_inside_its_transaction_leaves_the_gate_free_for_the_next(
    journal: Journal, run_id: str
) -> None:
    _claim(journal, run_id, "call-2")
    child = textwrap.dedent(
        """
        import sys
        from saga_worker import open_journal
        from saga_worker.core import faults
        from saga_worker.journal.records import ClaimStatus, FinishedClaim

        url, run_id = sys.argv[1:]
        faults.enable()
        faults.configure("before_next_claim=kill")
        journal = open_journal(url)
        journal.finish_and_claim(
            FinishedClaim(run_id, "call-2", "me", ClaimStatus.COMPENSATED), run_id, "call-1",
            via_run_id=run_id, owner="me", ttl=30.0, idempotency_key=f"{run_id}:comp:call-1",
        )
        """
    )
    done = subprocess.run([sys.executable, "-c", child, journal.url, run_id], timeout=120, check=False)
    assert done.returncode == -9  # killed inside the transaction, the gate held

    assert _gate_is_free(journal.url)
    assert journal.get_claim(run_id, "call-1") is None  # nothing of the killed transaction committed
    taken = _finish_and_claim_next(journal, run_id)  # the next writer is not kept waiting
    assert taken is not None
    claimed = journal.get_claim(run_id, "call-1")
    assert claimed is not None and claimed.status is ClaimStatus.CLAIMED


def test_a_writer_killed_holding_the_gate_leaves_it_free_though_a_child_it_forked_lives_on(
    journal: Journal, run_id: str, tmp_path: Path
) -> None:
    _claim(journal, run_id, "call-2")
    pid_file = tmp_path / "child.pid"
    child = textwrap.dedent(
        """
        import os, signal, sys, time
        from saga_worker import open_journal
        from saga_worker.core import faults
        from saga_worker.journal.records import ClaimStatus, FinishedClaim

        url, run_id, pid_file = sys.argv[1:]

        def fork_then_die(_name, _key):
            child = os.fork()  # inside the transaction: the gate is held, its file open
            if child == 0:
                time.sleep(120)
                os._exit(0)
            with open(pid_file, "w") as fh:
                fh.write(str(child))
            os.kill(os.getpid(), signal.SIGKILL)

        faults.enable()
        journal = open_journal(url)
        with faults.calling("before_next_claim", fork_then_die):
            journal.finish_and_claim(
                FinishedClaim(run_id, "call-2", "me", ClaimStatus.COMPENSATED), run_id, "call-1",
                via_run_id=run_id, owner="me", ttl=30.0, idempotency_key=f"{run_id}:comp:call-1",
            )
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, journal.url, run_id, str(pid_file)], timeout=120, check=False
    )
    assert done.returncode == -9
    forked = int(pid_file.read_text())
    try:
        os.kill(forked, 0)  # the child the killed writer forked is still alive
        assert _gate_is_free(journal.url)
        assert _finish_and_claim_next(journal, run_id) is not None  # the next writer is not kept waiting
    finally:
        os.kill(forked, signal.SIGKILL)
