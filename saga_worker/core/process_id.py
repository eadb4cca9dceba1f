"""This process's id, asked of the OS once per process rather than on every call.

Every step of an unwind asks "is this still the process that made it?" of a connection kept per
thread, of the lease keeper's thread, and puts the id in its claim's owner token: each
``os.getpid()`` is a system call, and the id changes only at a fork, which ``os.register_at_fork``
reports (Celery's prefork pool forks through ``os.fork``)."""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

    def current() -> int:
        """This process's id."""
        return _pid

else:  # no fork on this platform: the id never changes, but ask anyway
    current = os.getpid
