"""A ``compensate`` hook called under a timeout: on its own thread, which the caller may stop waiting for.

A Python thread cannot be killed. A hook that outlives its timeout goes on running, and whatever it
does may still land; so the step it undoes stays claimed (its lease renewed) until the thread ends,
and the thread's real outcome is then written as the claim's (``when_done``). Only the death of the
process ends it sooner: its lease then lapses and a later unwind re-drives the step with the same key.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from ..recording.tools import Hook, call_hook

# Hook calls whose caller stopped waiting (timed out) and that still run, in this process.
_abandoned: set[HookCall] = set()
_abandoned_changed = threading.Condition()


class HookCall:
    """One hook call on a daemon thread (a hung hook must not keep its process from exiting)."""

    def __init__(self, hook: Hook, args: tuple[Any, ...]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        # What stopped the caller's wait early (a Celery soft time limit raised in the waiting thread).
        self.interrupted: BaseException | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._on_end: Callable[[HookCall], None] | None = None
        context = contextvars.copy_context()  # the hook sees the caller's context (tracing, app state)
        self._thread = threading.Thread(
            target=context.run, args=(self._run, hook, args), name="saga-compensate-hook", daemon=True
        )
        self._thread.start()

    def _run(self, hook: Hook, args: tuple[Any, ...]) -> None:
        try:
            self.value = call_hook(hook, *args)
        except BaseException as exc:  # handed to the caller, or to the late outcome
            self.error = exc
        with self._lock:
            self._done.set()
            on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(self)
        with _abandoned_changed:
            _abandoned.discard(self)
            _abandoned_changed.notify_all()

    def wait(self, timeout: float) -> bool:
        """Has the hook ended within ``timeout`` seconds? An exception raised into the waiting thread
        (Celery's SoftTimeLimitExceeded) ends the wait as a timeout: the hook itself is not stopped
        by it, and is noted in ``interrupted``."""
        try:
            return self._done.wait(timeout)
        except BaseException as exc:
            if self._done.is_set():
                return True
            self.interrupted = exc
            return False

    def result(self) -> Any:
        """The hook's return value, or its exception raised (once it has ended)."""
        if self.error is not None:
            raise self.error
        return self.value

    def when_done(self, callback: Callable[[HookCall], None]) -> None:
        """Call ``callback(self)`` once the hook has ended: on the hook's thread, or here if it already
        has. The caller stops waiting: until then the call counts as abandoned (``wait_for_abandoned``)."""
        with self._lock:
            if not self._done.is_set():
                self._on_end = callback
                with _abandoned_changed:
                    _abandoned.add(self)
                return
        callback(self)

    @property
    def running(self) -> bool:
        return not self._done.is_set()


def abandoned() -> int:
    """How many timed-out hook calls still run in this process."""
    with _abandoned_changed:
        return len(_abandoned)


def wait_for_abandoned() -> None:
    """Block until every timed-out hook call of this process has ended (their outcomes written).

    For a Celery step task in a prefork child whose message carries a hard time limit: the pool kills
    the child at that limit, and with it any hook that never returns, so it can no longer land. An
    exception raised into this thread meanwhile (the soft limit) is ignored: the hook it was meant for
    runs on another thread, and only the hard limit can stop it."""
    while True:
        try:
            with _abandoned_changed:
                if not _abandoned:
                    return
                _abandoned_changed.wait(1.0)
        except Exception:  # SoftTimeLimitExceeded: wait on, for the hook or the hard limit
            continue
