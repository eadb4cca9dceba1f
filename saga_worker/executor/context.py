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

from ..core.redact import redact_text
from ..errors import InvalidInputError, ToolsNotConfiguredError
from ..journal import Journal, open_journal
from ..journal import prepare_journal as prepare_journal_at
from ..locks import StepLock, open_lock
from ..recording.tools import Tool, check_tools
from ..settings import SagaSettings, get_settings

log = logging.getLogger(__name__)


def import_tools(spec: str) -> Any:
    """What ``"package.module:attribute"`` names, imported but not called: the mapping of tools, or
    the callable that returns it. InvalidInputError naming the setting when it cannot be imported."""
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
    return value


def load_tools(spec: str) -> dict[str, Tool]:
    """Import ``"package.module:attribute"``: a mapping of tool name to Tool, or a callable returning one."""
    value = import_tools(spec)
    attribute = spec.partition(":")[2]
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


# What ``install(app, tools=...)`` may be given: the mapping, a "package.module:attribute" spec, or
# a callable returning the mapping. The last two are loaded on first use, after the app's framework
# is set up (a Django app's tools import its models: they cannot load before ``django.setup()``).
ToolsSource = Mapping[str, Tool] | str | Callable[[], Mapping[str, Tool]]


def _load_source(source: ToolsSource) -> dict[str, Tool]:
    if isinstance(source, str):
        return load_tools(source)
    if isinstance(source, Mapping):
        return check_tools(source)
    value = source()
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"tools callable returned a {type(value).__name__}, not a mapping of name to Tool"
        )
    return check_tools(value)


def describe_source(source: ToolsSource | None) -> str | None:
    """How a banner or an error names where tools come from (None: nowhere)."""
    if source is None:
        return None
    if isinstance(source, str):
        return source
    if isinstance(source, Mapping):
        return f"install(app, tools=...): {', '.join(sorted(source)) or 'none'}"
    return f"install(app, tools={getattr(source, '__qualname__', repr(source))})"


class WorkerContext:
    """One process's journal, tools and lock, each opened on first use.

    Tools come from ``tools`` (what ``install(app, tools=...)`` was given), else ``SAGA_TOOLS``; with
    neither, asking for them raises :class:`ToolsNotConfiguredError` (no fallback, ever)."""

    def __init__(
        self,
        settings: SagaSettings | None = None,
        *,
        tools_loader: Callable[[str], dict[str, Tool]] = load_tools,
        tools: ToolsSource | None = None,
        create_journal: bool = True,
    ) -> None:
        self.settings = settings if settings is not None else get_settings()
        self._create_journal = create_journal
        self._tools_loader = tools_loader
        self._tools_source = tools
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._tools: dict[str, Tool] | None = None
        self._step_lock: StepLock | None = None
        self._step_lock_opened = False

    @property
    def journal(self) -> Journal:
        journal = self._journal  # once open, read without the lock: every saga task asks for it
        if journal is not None:
            return journal
        with self._lock:
            if self._journal is None:
                self._journal = open_journal(
                    self.settings.resolved_journal_url(), create=self._create_journal
                )
            return self._journal

    @property
    def tools_source(self) -> str | None:
        """Where this context's tools come from, for a banner (None: nothing is configured)."""
        if self._tools_source is not None:
            return describe_source(self._tools_source)
        return self.settings.tools

    def _tools_configured(self) -> bool:
        # What ``tools_source is None`` says, without writing the description (every step asks).
        return self._tools_source is not None or self.settings.tools is not None

    def require_tools(self, where: str) -> dict[str, Tool]:
        """The tools, or :class:`ToolsNotConfiguredError` naming ``where`` they were needed."""
        if not self._tools_configured():
            raise ToolsNotConfiguredError(where)
        return self.tools

    @property
    def tools(self) -> dict[str, Tool]:
        tools = self._tools  # once loaded, read without the lock
        if tools is not None:
            return tools
        with self._lock:
            if self._tools is None:
                if self._tools_source is not None:
                    self._tools = _load_source(self._tools_source)
                elif self.settings.tools is not None:
                    self._tools = self._tools_loader(self.settings.tools)
                else:
                    raise ToolsNotConfiguredError("this worker")
            return self._tools

    @property
    def tools_if_configured(self) -> dict[str, Tool] | None:
        """The tools when some are configured, else None (for what reads better with them, such as
        the console's run page, and works without)."""
        return self.tools if self._tools_configured() else None

    @property
    def lock(self) -> StepLock | None:
        """Redis step locks when ``SAGA_REDIS_URL`` is set; otherwise the journal claim alone."""
        if self._step_lock_opened:  # once opened, read without the lock
            return self._step_lock
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
_configured_tools: ToolsSource | None = None


def configure(settings: SagaSettings | None = None, tools: ToolsSource | None = None) -> None:
    """Use these settings (else the environment's) and these tools (else ``SAGA_TOOLS``) from now on.

    A mapping is checked now; a spec string or a callable is loaded on first use."""
    global _configured_settings, _configured_tools
    if isinstance(tools, Mapping):
        tools = check_tools(tools)
    elif tools is not None and not isinstance(tools, str) and not callable(tools):
        raise InvalidInputError(
            f"tools must be a mapping of name to Tool, a 'package.module:attribute' string or a callable, "
            f"got {type(tools).__name__}"
        )
    with _guard:
        _configured_settings, _configured_tools = settings, tools
    reset()


def configured_settings() -> SagaSettings:
    """The settings this process's workers use: ``install(app, settings=...)``'s, else the environment's."""
    return _configured_settings if _configured_settings is not None else get_settings()


def tools_source() -> str | None:
    """Where this process's workers take their tools from (None: nowhere, and they refuse)."""
    if _configured_tools is not None:
        return describe_source(_configured_tools)
    return configured_settings().tools


def check_tools_at_start(where: str) -> None:
    """Before a worker consumes anything: :class:`ToolsNotConfiguredError` naming ``where`` without
    tools, and InvalidInputError naming the setting when a ``SAGA_TOOLS`` (or ``install`` string)
    cannot be imported or names something that is not a mapping of tools, so the worker refuses to
    start rather than say ready and answer every step with that error.

    Imported in the worker's main process, before its pool forks, as Celery imports the app's task
    modules. A callable is left for each process to call on first use, as before: what it opens (a
    connection, a client) must be its own process's, never one a fork would share."""
    source = _configured_tools if _configured_tools is not None else configured_settings().tools
    if source is None:
        raise ToolsNotConfiguredError(where)
    if isinstance(source, str):
        value = import_tools(source)
        if isinstance(value, Mapping) or not callable(value):
            load_tools(source)  # checks the mapping (or says what it is instead); calls nothing


def _new_context() -> WorkerContext:
    return WorkerContext(_configured_settings, tools=_configured_tools)


def current() -> WorkerContext:
    """This process's context (a forked child gets a fresh one)."""
    global _current, _current_pid
    ctx = _current  # this process's, read without the guard: every saga task asks for it
    if ctx is not None and _current_pid == os.getpid():
        return ctx
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
        describe_source(_configured_tools)
        if _configured_tools is not None
        else f"SAGA_TOOLS={ctx.settings.tools!r}"
    )
    try:
        names = sorted(ctx.tools)
    except Exception as exc:  # noqa: BLE001 - the worker keeps running; every unwind will say why too
        log.error("saga-worker cannot load its tools (%s): %s", source, exc)
        return
    log.info("saga-worker tools (%s): %s", source, ", ".join(names) if names else "none")


def prepare_journal() -> None:
    """In a worker's main process, before its pool forks: import the configured journal's driver and
    compile its statements (no connection), so that each pool child opens the journal on its first
    task without paying for them. A journal that cannot be prepared is only logged: each task that
    needs it says why, as it would have."""
    try:
        prepare_journal_at(configured_settings().resolved_journal_url())
    except Exception as exc:  # noqa: BLE001 - the worker starts all the same; its tasks report the error
        log.warning(
            "saga-worker could not prepare its journal before starting its pool: %s", redact_text(str(exc))
        )


def reset(*, after_fork: bool = False) -> None:
    """Drop this process's context; the next :func:`current` reopens everything and re-reads the
    settings, unless ``after_fork``: a forked child keeps its parent's, read from the same environment
    (reading them again cost a pool child's first task about 14 ms here)."""
    global _current
    with _guard:
        ctx, _current = _current, None
        if not after_fork:
            get_settings.cache_clear()
    if ctx is not None:
        ctx.close(after_fork=after_fork)
