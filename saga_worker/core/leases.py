"""Keeps compensation leases alive while hooks run, from one background thread per process.

A hook may run longer than the lease; renewing from a shared thread (rather than one thread per
step) keeps the common case, a hook far shorter than the lease, free of any thread start-up cost.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from . import process_id

log = logging.getLogger(__name__)
_HOST = socket.gethostname()[:40]
_OWNER_NONCE = uuid.uuid4().hex[:6]  # with the pid, tells this process from an earlier one of the same pid
_owner_counter = itertools.count(1)

Renew = Callable[[], bool]


class LeaseKeeper:
    def __init__(self) -> None:
        # ``hold`` and ``stop`` (twice per compensated step) take the condition's lock itself: the
        # Condition's own ``with`` costs two Python calls more each time.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._leases: dict[int, tuple[float, float, Renew]] = {}  # id -> (next renewal, interval, renew)
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._wakes_at = float("inf")  # when the thread next looks, by its own plan
        # How long the thread sleeps with no lease to renew: the shortest interval held so far. A new
        # lease of that interval or longer is then never due before the thread looks anyway, so
        # ``hold`` need not wake it: a notify hands the GIL to the keeper and back (two context
        # switches) on a path that otherwise costs far less.
        self._idle = 60.0
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget_after_fork)

    def _forget_after_fork(self) -> None:
        # A forked child runs none of its parent's hooks: renewing their leases from the child would keep
        # a dead parent's claims alive forever. And the parent's lock may have been held at the fork.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._leases = {}
        self._thread = None
        self._pid = os.getpid()
        self._wakes_at = float("inf")

    @contextmanager
    def keep(self, renew: Renew, interval: float) -> Iterator[None]:
        """Call ``renew`` every ``interval`` seconds while the block runs (stops once it returns False)."""
        stop = self.hold(renew, interval)
        try:
            yield
        finally:
            stop()

    def hold(self, renew: Renew, interval: float) -> Callable[[], None]:
        """Call ``renew`` every ``interval`` seconds until the returned ``stop()`` is called (or ``renew``
        returns False). For a lease that must outlive the block that took it: a compensate hook that
        timed out still runs on its own thread, and its step stays claimed until that thread ends."""
        lease_id = next(self._ids)
        due = time.monotonic() + interval
        with self._lock:
            self._ensure_thread()
            self._leases[lease_id] = (due, interval, renew)
            self._idle = min(self._idle, interval)
            if due < self._wakes_at:  # wake the thread only if it would otherwise look too late
                self._cond.notify()

        def stop() -> None:
            with self._lock:
                self._leases.pop(lease_id, None)

        return stop

    def _ensure_thread(self) -> None:
        # A forked child (Celery prefork) inherits the object but not the thread: start its own. A
        # thread whose loop ended (it never returns; only an error ends it) has set ``_thread`` to None.
        if self._thread is None or self._pid != process_id.current():
            self._pid = process_id.current()
            self._wakes_at = 0.0  # a new thread looks at once
            self._thread = threading.Thread(target=self._loop, name="saga-lease-keeper", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        try:
            self._renew_forever()
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None  # the next ``hold`` starts another

    def _renew_forever(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [(i, r) for i, (at, _, r) in self._leases.items() if at <= now]
                for lease_id, _ in due:
                    _, interval, renew = self._leases[lease_id]
                    self._leases[lease_id] = (now + interval, interval, renew)
                if not due:
                    wake = min((at for at, _, _ in self._leases.values()), default=now + self._idle)
                    self._wakes_at = wake
                    self._cond.wait(timeout=max(0.0, wake - now))
                    self._wakes_at = 0.0  # awake: it looks at every lease before it sleeps again
                    continue
            for lease_id, renew in due:
                try:
                    still_ours = renew()
                except Exception:  # a database blip: try again next interval, the lease has slack
                    log.warning("lease renewal failed; will retry", exc_info=True)
                    continue
                if not still_ours:
                    log.warning("lease lost while its hook runs; its outcome will not be written")
                    with self._cond:
                        self._leases.pop(lease_id, None)


keeper = LeaseKeeper()


def new_owner(tag: str = "") -> str:
    """An owner token, unique per attempt, that also tells a person where the holder ran.

    A counter rather than a fresh uuid per attempt: this is on every step's path."""
    return f"{_HOST}:{process_id.current()}:{tag or f'{_OWNER_NONCE}{next(_owner_counter)}'}"[:100]
