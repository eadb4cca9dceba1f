"""Bulk actions: ``compensate``, ``redrive`` and ``approve-compensation`` on every run a set of
filters selects, for the CLI and the console alike.

A bulk action is planned first (what would be done to which runs, and which it skips and why), then
done run by run through the same single-run action an operator would take (``actions``). It keeps
no state of its own: whether a run still needs the action is read from the journal each time, so a
bulk action stopped midway (a kill, a lost connection) is resumed by running it again, and a run
done before is skipped, never done twice:

- compensate: a run condemned (its tombstone written) or with an unwind request queued
  (``unwind-queued`` in its audit trail, written before the request is sent) is done; in process
  (``local``), a condemned run whose unwind is pending or incomplete (one stopped midway) is
  unwound again, which redoes no step: each step's claim says it is done;
- redrive: a run no longer flagged ``attention`` is done (a re-drive marks it pending first);
- approve-compensation: a gated compensation with a decision is done (the gate's row).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.checks import check_age, check_run_id, check_tool_name
from ..errors import InvalidInputError, SagaError
from ..journal.records import RunInfo, RunQuery, RunStatus, UnwindState
from ..journal.roles import OperatorJournal
from ..recording.tools import Tool
from .actions import queued_unwind
from .inbox import awaiting_gates
from .unwinds import journal_steps

BULK_ACTIONS = ("compensate", "redrive", "approve-compensation")
# At most this many runs in one bulk action: a filter that selects more is narrowed, or run again.
BULK_MAX = 10_000
_PAGE = 500


@dataclass(frozen=True)
class Filters:
    """What selects the runs: a run status or unwind state, a tool among its calls, an age of its
    last update, the start of its id. Combined: a run must match every one given."""

    status: str | None = None
    tool: str | None = None
    older_than: str | None = None
    run_prefix: str | None = None
    # The console's own filters: an unwind state beside a run status, condemned or not ("yes", "no"),
    # any part of the id.
    unwind: str | None = None
    condemned: str | None = None
    contains: str | None = None

    @classmethod
    def checked(cls, **given: str | None) -> Filters:
        values = {k: (v.strip() if isinstance(v, str) and v.strip() else None) for k, v in given.items()}
        filters = cls(**values)
        if filters.condemned not in (None, "yes", "no"):
            raise InvalidInputError(f"condemned must be yes or no, got {filters.condemned!r}")
        if not any(v for k, v in values.items() if k != "condemned"):
            raise InvalidInputError(
                "a bulk action needs at least one filter (--status, --tool, --older-than, --run-prefix): "
                "or name one run"
            )
        filters.query()  # refuses a status, prefix or age it cannot read
        if filters.tool is not None:
            check_tool_name(filters.tool)
        return filters

    def query(self, before: tuple[float, str] | None = None) -> RunQuery:
        status = unwind = None
        if self.unwind is not None:
            if self.unwind not in {s.value for s in UnwindState}:
                raise InvalidInputError(f"unknown unwind state {self.unwind!r}")
            unwind = UnwindState(self.unwind)
        if self.status is not None:
            if self.status in {s.value for s in RunStatus}:
                status = RunStatus(self.status)
            elif self.status in {s.value for s in UnwindState}:
                unwind = UnwindState(self.status)
            else:
                known = [s.value for s in RunStatus] + [s.value for s in UnwindState]
                raise InvalidInputError(
                    f"--status {self.status!r} is neither a run status nor an unwind state: one of "
                    + ", ".join(known)
                )
        if self.run_prefix is not None:
            check_run_id(self.run_prefix)
        return RunQuery(
            status=status,
            unwind_state=unwind,
            condemned=None if self.condemned is None else self.condemned == "yes",
            search=self.run_prefix,
            contains=self.contains,
            before=before,
            limit=_PAGE,
        )

    def age(self) -> float | None:
        return None if self.older_than is None else check_age(self.older_than)

    def describe(self) -> str:
        given = {"status": self.status, "unwind": self.unwind, "condemned": self.condemned,
                 "tool": self.tool, "older than": self.older_than, "run id starting": self.run_prefix,
                 "run id containing": self.contains}  # fmt: skip
        return ", ".join(f"{k} {v}" for k, v in given.items() if v is not None)

    def as_dict(self) -> dict[str, str | None]:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class Target:
    """One run to act on; for approve-compensation, the steps (suffixes) whose compensation waits."""

    run_id: str
    steps: tuple[str, ...] = ()


@dataclass
class BulkPlan:
    """What a bulk action would do now: the runs to act on, and those it skips with why."""

    action: str
    filters: Filters
    todo: list[Target] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # why -> run ids
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "filters": self.filters.as_dict(),
            "would_do": len(self.todo),
            "runs": [{"run_id": t.run_id, "steps": list(t.steps)} for t in self.todo],
            "skipped": {why: len(ids) for why, ids in self.skipped.items()},
            "truncated": self.truncated,
        }


@dataclass
class BulkSummary:
    """What a bulk action did: each run done (with what it gave: a task id, a report's end), skipped
    (done before, or no longer in need) or failed (with the error), in order."""

    action: str
    done: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "done": len(self.done),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "runs": self.done + self.skipped + self.failed,
        }


def selected(journal: OperatorJournal, filters: Filters) -> Iterator[RunInfo]:
    """The runs the filters select, newest updated first (pruned stubs never)."""
    age = filters.age()
    before = None if age is None else (journal.now() - age, "")
    while True:
        page = journal.page_runs(filters.query(before))
        for run in page:
            if run.pruned:
                continue
            if filters.tool is not None and not any(
                r.tool_name == filters.tool for r in journal.list_records(run.run_id)
            ):
                continue
            yield run
        if len(page) < _PAGE:
            return
        before = (page[-1].updated_at, page[-1].run_id)


def still_to_do(
    action: str,
    journal: OperatorJournal,
    run: RunInfo,
    *,
    tools: Mapping[str, Tool] | None,
    pending_for: float,
    tool: str | None = None,
    local: bool = False,
) -> tuple[Target | None, str]:
    """Whether ``run`` still needs ``action`` as the journal stands now: the target, or None and why not."""
    if run.pruned:
        return None, "pruned"
    if action == "compensate":
        if run.condemned and local and run.unwind_state in (UnwindState.PENDING, UnwindState.INCOMPLETE):
            return Target(run.run_id), ""  # an unwind stopped midway: go on with it here
        if run.condemned:
            return None, "already condemned"
        if queued_unwind(journal, run.run_id, pending_for) is not None:
            return None, "an unwind is already queued"
        return Target(run.run_id), ""
    if action == "redrive":
        if not run.condemned or run.unwind_state is not UnwindState.ATTENTION:
            return None, f"not flagged for attention (unwind {run.unwind_state.value})"
        return Target(run.run_id), ""
    if action == "approve-compensation":
        if not tools:
            raise InvalidInputError(
                "approve-compensation in bulk asks the tools which steps are gated: set SAGA_TOOLS"
            )
        steps = journal_steps(journal, run.run_id)
        gates = [
            g for g in awaiting_gates(journal, run, steps, tools) if tool is None or g["tool_name"] == tool
        ]
        if not gates:
            return None, "no compensation awaits a decision"
        return Target(run.run_id, tuple(g["suffix"] for g in gates)), ""
    raise InvalidInputError(f"unknown bulk action {action!r}; one of {', '.join(BULK_ACTIONS)}")


def plan_bulk(
    action: str,
    filters: Filters,
    journal: OperatorJournal,
    *,
    tools: Mapping[str, Tool] | None = None,
    pending_for: float = 300.0,
    limit: int = BULK_MAX,
    local: bool = False,
) -> BulkPlan:
    """What ``action`` would do now to the runs ``filters`` select (at most ``limit``)."""
    if action not in BULK_ACTIONS:
        raise InvalidInputError(f"unknown bulk action {action!r}; one of {', '.join(BULK_ACTIONS)}")
    plan = BulkPlan(action, filters)
    for run in selected(journal, filters):
        if len(plan.todo) >= limit:
            plan.truncated = True
            break
        target, why = still_to_do(
            action, journal, run, tools=tools, pending_for=pending_for, tool=filters.tool, local=local
        )
        if target is None:
            plan.skipped.setdefault(why, []).append(run.run_id)
        else:
            plan.todo.append(target)
    return plan


def run_bulk(
    plan: BulkPlan,
    journal: OperatorJournal,
    act: Callable[[Target], Any],
    *,
    tools: Mapping[str, Tool] | None = None,
    pending_for: float = 300.0,
    progress: Callable[[str], None] | None = None,
    local: bool = False,
) -> BulkSummary:
    """Do the plan, run by run: each run is looked at again just before (another operator, an
    earlier attempt or the sweeper may have acted since) and skipped if done. ``act`` is the single
    run's action; what it returns goes to the summary. One run's error is recorded and the rest go
    on: the summary says which failed and why."""
    summary = BulkSummary(plan.action)
    for target in plan.todo:
        run = journal.get_run(target.run_id)
        now, why = (
            (None, "no longer in the journal")
            if run is None
            else still_to_do(
                plan.action,
                journal,
                run,
                tools=tools,
                pending_for=pending_for,
                tool=plan.filters.tool,
                local=local,
            )
        )
        if now is None:
            summary.skipped.append({"run_id": target.run_id, "outcome": "skipped", "why": why})
        else:
            try:
                result = act(now)
            except SagaError as exc:
                summary.failed.append({"run_id": target.run_id, "outcome": "failed", "error": str(exc)})
            else:
                summary.done.append({"run_id": target.run_id, "outcome": "done", "result": result})
        if progress is not None:
            progress(target.run_id)
    return summary
