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

from ..tools import Hook, call_hook


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
        """Call ``callback(self)`` once the hook has ended: on the hook's thread, or here if it already has."""
        with self._lock:
            if not self._done.is_set():
                self._on_end = callback
                return
        callback(self)

    @property
    def running(self) -> bool:
        return not self._done.is_set()
