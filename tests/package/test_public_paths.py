"""Every path the documentation names is importable, with the names it promises there: the package
root's ``__all__``, the modules the docs, README, examples and CLI pages cite (``saga_worker.x.y``,
``module:attr``), and the source files they point to. Moving a module inside the package must keep
each of these working, at its new home or through a shim at the old path."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import saga_worker
from saga_worker.executor.context import load_tools

REPO = Path(__file__).resolve().parents[2]
# What the users read: the site, the README, the examples, the CLI pages' mkdocs-click modules, the
# installed-wheel test (what a fresh venv imports).
READ = [
    REPO / "README.md",
    REPO / "mkdocs.yml",
    *(REPO / "docs").rglob("*.md"),
    *(REPO / "examples").rglob("*.py"),
]
READ += [*(REPO / "examples").rglob("*.md"), *(REPO / "tests" / "install").rglob("*.py")]
DOTTED = re.compile(r"\bsaga_worker(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")
SOURCE_FILE = re.compile(r"\bsaga_worker/[\w/]+\.py\b")
# Django permissions under the app's label (contrib/django/models.py), which the pages name as
# ``saga_worker.<codename>``: not Python paths.
PERMISSIONS = {"saga_worker.view_run", "saga_worker.compensate_run", "saga_worker.decide"}

# The root's surface today: a move that drops or adds a name here is a change of the contract.
ROOT = {
    "ApprovalError", "AuditAction", "AuditRecord", "AuditVia", "CallOptions", "CallResult",
    "CompensatedRunError", "CompensationEntry", "CompensationGate", "CompensationReport",
    "CompensationStatus", "Finish", "GateDecision", "InvalidInputError", "Journal", "JournalError",
    "JournalUnavailableError", "MalformedRecordError", "MemoryJournal", "NoEffect", "OpenTransactionError",
    "PendingCall", "Planner", "RecoverResult", "ReplayMismatchError", "RetryPolicy", "RunEndedError",
    "RunEvent", "RunExistsError", "RunPrunedError", "RunResult", "RunState", "SagaError", "SagaRun",
    "SideEffectRetryBlockedError", "SqlJournal", "Tool", "ToolCall", "ToolFailedError",
    "ToolsNotConfiguredError", "UnknownRunError", "UnknownToolError", "approve", "approve_compensation",
    "assert_not_compensated", "compensate_run", "deny", "deny_compensation", "fork_run", "open_journal",
    "pending_calls", "read_audit", "resume_run", "run_compensated", "run_durable", "saga", "scripted",
    "stream_durable", "tool", "unwind_halted", "unwind_needs_attention",
}  # fmt: skip

# Each documented module and the names the docs use from it (docs/reference, docs/guides, docs/api,
# docs/cli): pinned here so that a page rewritten later cannot take a path out of the check.
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "saga_worker.celery": ("compensate_run", "record_call", "install", "make_app", "DeliveriesExhausted"),
    "saga_worker.contrib.django": ("journal", "tools", "close_journals"),
    "saga_worker.contrib.django.test": ("SagaDiscoverRunner",),
    "saga_worker.cli": ("main",),
    "saga_worker.cli.commands_approvals": (),
    "saga_worker.cli.commands_console": (),
    "saga_worker.cli.commands_demo": (),
    "saga_worker.cli.commands_inbox": (),
    "saga_worker.cli.commands_status": (),
    "saga_worker.celery.health": (),
    "saga_worker.celery.result_text": (),
    "saga_worker.cli.commands_journal": (),
    "saga_worker.cli.commands_processes": (),
    "saga_worker.cli.commands_unwind": (),
    "saga_worker.journal": ("migrate",),  # the rollback of docs/guides/upgrading.md
    "saga_worker.journal.sql": ("SqlJournal",),
    "saga_worker.settings": ("get_settings", "SagaSettings"),
    "saga_worker.errors": (),
    "saga_worker.observing": (),
    "saga_worker.compensation.alerts": ("unwind_halted", "unwind_needs_attention"),
    "saga_worker.demo": ("TOOLS", "order_planner"),
    "saga_worker.transactions": ("watch_sqlalchemy",),
    "saga_worker.actions": (),
    "saga_worker.audit": ("REASON_MAX", "read_audit"),
    "saga_worker.integrations": ("hooks", "call_options"),
    "saga_worker.integrations.langchain": ("SagaMiddleware",),
    "saga_worker.integrations.openai_agents": ("SagaRunner", "saga_tool"),
    "saga_worker.integrations.pydantic_ai": ("SagaCapability",),
}
# An integration imports its framework: without that extra installed (`make test-core`) it is skipped.
FRAMEWORK = {
    "saga_worker.integrations.langchain": "langchain",
    "saga_worker.integrations.openai_agents": "agents",
    "saga_worker.integrations.pydantic_ai": "pydantic_ai",
}


def _module(path: str) -> ModuleType:
    framework = FRAMEWORK.get(path)
    if framework is not None and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{path} needs {framework}, not installed here")
    return importlib.import_module(path)


def resolve(reference: str) -> Any:
    """``saga_worker.a.b.c`` or ``saga_worker.a:c``: the longest importable module, then attributes."""
    dotted, _, attr = reference.partition(":")
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found: Any = _module(name)
        except ModuleNotFoundError as missing:
            if missing.name is not None and name.startswith(missing.name):
                continue  # this prefix is no module: try a shorter one
            raise
        for each in [*parts[cut:], *([attr] if attr else [])]:
            found = getattr(found, each)
        return found
    raise AssertionError(f"{reference}: no module")


def test_the_root_exports_exactly_its_documented_surface_and_each_name_is_there() -> None:
    assert set(saga_worker.__all__) == ROOT
    missing = [name for name in sorted(ROOT) if getattr(saga_worker, name, None) is None]
    assert missing == []


@pytest.mark.parametrize("path", sorted(DOCUMENTED))
def test_each_documented_module_imports_with_the_names_the_docs_use(path: str) -> None:
    module = _module(path)
    assert module.__name__ == path
    missing = [name for name in DOCUMENTED[path] if not hasattr(module, name)]
    assert missing == [], f"{path} lacks {missing}"


def cited() -> dict[str, list[str]]:
    """Each ``saga_worker.…`` reference in what users read -> the files that cite it."""
    found: dict[str, list[str]] = {}
    for page in READ:
        for reference in set(DOTTED.findall(page.read_text(errors="replace"))):
            if reference not in PERMISSIONS:
                found.setdefault(reference, []).append(str(page.relative_to(REPO)))
    return found


def test_the_pinned_modules_are_the_ones_the_pages_cite() -> None:
    """A module a page cites and the list above misses is added to it (so it is pinned from then on)."""
    modules = {ref.partition(":")[0] for ref in cited()}
    package = {f"saga_worker.{name}" for name in _package_modules()}
    assert sorted(m for m in modules & package if m not in DOCUMENTED) == []


def _package_modules() -> set[str]:
    package = REPO / "saga_worker"
    names = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names - {""}


# The agent adapters' frameworks, by adapter: optional extras that the core suite on other Pythons
# (make test-core-quick) leaves out; the main suite installs them, so there each reference resolves.
FRAMEWORKS = {"langchain": "langchain", "openai_agents": "agents", "pydantic_ai": "pydantic_ai"}


def _framework_missing(reference: str) -> str | None:
    parts = reference.split(".")
    if parts[:2] != ["saga_worker", "integrations"] or len(parts) < 3 or parts[2] not in FRAMEWORKS:
        return None
    framework = FRAMEWORKS[parts[2]]
    return framework if importlib.util.find_spec(framework) is None else None


@pytest.mark.parametrize("reference", sorted(cited()))
def test_every_reference_in_the_docs_resolves(reference: str) -> None:
    if reference == "saga_worker.__file__":
        return  # the module's own attribute, named in a snippet
    missing = _framework_missing(reference)
    if missing is not None:
        pytest.skip(f"{missing!r}, an optional extra, is not installed in this suite (the main suite has it)")
    assert resolve(reference) is not None


def test_every_source_file_the_docs_point_to_exists() -> None:
    pointed = {
        (m, str(p.relative_to(REPO)))
        for p in READ
        for m in SOURCE_FILE.findall(p.read_text(errors="replace"))
    }
    missing = sorted(f"{page} points to {path}" for path, page in pointed if not (REPO / path).is_file())
    assert pointed and missing == []


def test_the_demo_tools_load_by_the_name_a_worker_is_given() -> None:
    tools, documented = load_tools("saga_worker.demo:TOOLS"), resolve("saga_worker.demo:TOOLS")
    assert tools and {name: tool for name, tool in tools.items() if tool is documented[name]} == documented
