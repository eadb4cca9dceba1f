"""Telemetry never breaks the work it watches: spans, their attributes, metrics and log formatting run
inside runs and unwinds (an unwind's, after its tombstone), so an error of theirs (a span processor or
exporter that raises, a metrics file that cannot be written) is logged once per process and per kind,
and the work goes on without it (docs/guides/tracing.md, docs/guides/operations.md).

Only ``Exception``: an interrupt (Ctrl-C, a worker's shutdown) is not telemetry's to swallow.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import wraps
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("saga_worker.observing")  # the name the docs give (operations, tracing)

P = ParamSpec("P")
R = TypeVar("R")

# What has failed in this process already (logged then, not again).
reported: set[str] = set()


def failed(what: str) -> None:
    """Say, once per process, that ``what`` failed; call it from the ``except`` that caught the error."""
    if what in reported:
        return
    reported.add(what)
    with contextlib.suppress(Exception):  # a log that cannot be written is no reason to stop either
        log.warning("%s failed; saga-worker goes on without it (logged once)", what, exc_info=True)


class quietly:  # noqa: N801 - used as a statement: ``with quietly("what"):``
    """``with quietly("recording a metric"): ...``: an error inside is reported (``failed``) and dropped."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if isinstance(exc, Exception):
            failed(self.what)
            return True
        return False


def harmless(what: str, default: Any = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A function that reports (``failed``) and returns ``default`` instead of raising an Exception."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - telemetry's error, reported; the caller's work goes on
                failed(what)
                return default  # type: ignore[no-any-return]

        return guarded

    return wrap


__all__ = ["failed", "harmless", "quietly", "reported"]
