"""What a worker process needs to unwind: settings, the journal, the tools and the step lock.

Opened lazily, once per process. Celery's prefork pool forks children from a parent that may have
opened the journal already; a child must not reuse the parent's pooled connections, so the pool's
``worker_process_init`` calls :func:`reset` and each child opens its own.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInputError
from ..journal import Journal, open_journal
from ..locks import StepLock, open_lock
from ..settings import SagaSettings, get_settings
from ..tools import Tool, check_tools

log = logging.getLogger(__name__)


def load_tools(spec: str) -> dict[str, Tool]:
    """Import ``"package.module:attribute"``: a mapping of tool name to Tool, or a callable returning one."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidInputError(f"SAGA_TOOLS must look like 'package.module:attribute', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure of the import is the setting's to name
        raise InvalidInputError(
            f"SAGA_TOOLS={spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError as exc:
            raise InvalidInputError(
                f"SAGA_TOOLS={spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from exc
    if callable(value) and not isinstance(value, Mapping):
        # Every error from here on names the setting: a worker's log must say what to fix.
        try:
            value = value()
        except Exception as exc:  # noqa: BLE001 - user code, called with no arguments
            raise InvalidInputError(
                f"SAGA_TOOLS={spec!r}: calling {attribute} with no arguments (to get the mapping of "
                f"tools) raised {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"SAGA_TOOLS={spec!r} is a {type(value).__name__}, not a mapping of name to Tool"
        )
    try:
        return check_tools(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"SAGA_TOOLS={spec!r}: {exc}", **exc.detail) from exc


class WorkerContext:
    """One process's journal, tools and lock, each opened on first use."""

    def __init__(
        self,
        settings: SagaSettings | None = None,
        *,
        tools_loader: Callable[[str], dict[str, Tool]] = load_tools,
    ) -> None:
        self.settings = settings if settings is not None else get_settings()
        self._tools_loader = tools_loader
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._tools: dict[str, Tool] | None = None
        self._step_lock: StepLock | None = None
        self._step_lock_opened = False

    @property
    def journal(self) -> Journal:
        with self._lock:
            if self._journal is None:
                self._journal = open_journal(self.settings.resolved_journal_url())
            return self._journal

    @property
    def tools(self) -> dict[str, Tool]:
        with self._lock:
            if self._tools is None:
                self._tools = self._tools_loader(self.settings.tools)
            return self._tools

    @property
    def lock(self) -> StepLock | None:
        """Redis step locks when ``SAGA_REDIS_URL`` is set; otherwise the journal claim alone."""
        with self._lock:
            if not self._step_lock_opened:
                self._step_lock = open_lock(self.settings.redis_url)
                self._step_lock_opened = True
            return self._step_lock

    def close(self, *, after_fork: bool = False) -> None:
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is None:
            return
        if after_fork:
            journal.reset_after_fork()  # the parent's connections are not ours to close
        else:
            journal.close()


_current: WorkerContext | None = None
_current_pid = 0
_guard = threading.Lock()
# Set by saga_worker.celery.install(app, settings=..., tools=...): what this process's workers use
# instead of the environment's settings and SAGA_TOOLS. Kept across reset() and inherited by forks.
_configured_settings: SagaSettings | None = None
_configured_tools: dict[str, Tool] | None = None


def configure(settings: SagaSettings | None = None, tools: Mapping[str, Tool] | None = None) -> None:
    """Use these settings (else the environment's) and these tools (else ``SAGA_TOOLS``) from now on."""
    global _configured_settings, _configured_tools
    checked = None if tools is None else check_tools(tools)
    with _guard:
        _configured_settings, _configured_tools = settings, checked
    reset()


def _new_context() -> WorkerContext:
    fixed = _configured_tools
    if fixed is None:
        return WorkerContext(_configured_settings)
    return WorkerContext(_configured_settings, tools_loader=lambda _spec: dict(fixed))


def current() -> WorkerContext:
    """This process's context (a forked child gets a fresh one)."""
    global _current, _current_pid
    with _guard:
        if _current is None or _current_pid != os.getpid():
            if _current is not None:
                _current.close(after_fork=True)
            _current, _current_pid = _new_context(), os.getpid()
        return _current


def log_tools() -> None:
    """Say, once at a worker's start, which tools it unwinds with (and where they came from): a step
    whose tool is missing reads skipped-no-hook, and the log is where a deploy without it shows first.
    A ``SAGA_TOOLS`` that cannot be loaded is logged as an error naming the setting."""
    ctx = current()
    source = (
        "install(app, tools=...)" if _configured_tools is not None else f"SAGA_TOOLS={ctx.settings.tools!r}"
    )
    try:
        names = sorted(ctx.tools)
    except Exception as exc:  # noqa: BLE001 - the worker keeps running; every unwind will say why too
        log.error("saga-worker cannot load its tools (%s): %s", source, exc)
        return
    log.info("saga-worker tools (%s): %s", source, ", ".join(names) if names else "none")


def reset(*, after_fork: bool = False) -> None:
    """Drop this process's context; the next :func:`current` re-reads settings and reopens everything."""
    global _current
    with _guard:
        ctx, _current = _current, None
        get_settings.cache_clear()
    if ctx is not None:
        ctx.close(after_fork=after_fork)
