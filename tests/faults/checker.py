"""The checker: rebuilds what every report should have said from the ledger and the journal, and
counts each broken promise of docs/reference/safety.md.

- lost: a condemned run's step whose effect happened (execute effect in the ledger) and was never
  undone (no compensation effect), once the unwind has settled;
- double: a step undone under more than one idempotency key (the provider could not deduplicate), or
  two compensate calls of one step in flight at once from holders that were not faulted;
- after tombstone: an execute effect the unwind never knew about (missing from the run's first
  report after its tombstone: its call was claimed after the tombstone);
- report mismatches: an entry whose status the ledger contradicts (compensated with no effect,
  skipped-not-executed for an effect that happened), a key that is not the stable key, a wrong order,
  or a not-attempted / halting pattern that docs/reference/compensation.md forbids.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from saga_worker import Journal
from saga_worker.core.keys import compensate_key
from saga_worker.journal.records import ClaimStatus, RecordStatus

from .ledger import Ledger

SETTLED = {"compensated", "already-compensated", "skipped-not-executed", "skipped-no-hook"}
HALTING = {"busy", "failed"}


@dataclass
class Verdict:
    lost: list[str] = field(default_factory=list)
    double: list[str] = field(default_factory=list)
    after_tombstone: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    steps: int = 0
    runs: int = 0
    reports: int = 0
    calls_per_step: list[int] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return len(self.lost) + len(self.double) + len(self.after_tombstone) + len(self.mismatches)

    @property
    def clean(self) -> bool:
        return self.violations == 0

    def summary(self) -> str:
        lines = [
            f"runs={self.runs} steps={self.steps} reports={self.reports} lost={len(self.lost)} "
            f"double={len(self.double)} after_tombstone={len(self.after_tombstone)} "
            f"mismatches={len(self.mismatches)}"
        ]
        for name in ("lost", "double", "after_tombstone", "mismatches"):
            lines += [f"  {name}: {item}" for item in getattr(self, name)[:10]]
        return "\n".join(lines)

    def calls_mean_max(self) -> tuple[float, int]:
        if not self.calls_per_step:
            return 0.0, 0
        return statistics.fmean(self.calls_per_step), max(self.calls_per_step)


def check(
    ledger: Ledger,
    journal: Journal,
    run_ids: Iterable[str] | None = None,
    *,
    excused_pids: Iterable[int] = (),
    settled: bool = True,
) -> Verdict:
    """Judge every condemned run (or ``run_ids``). ``settled``: the unwinds are over, so an undone
    effect is lost rather than pending. ``excused_pids`` were stopped or killed mid-hook by the test,
    so their calls may overlap a successor's (the provider's key deduplicates those)."""
    verdict = Verdict()
    excused = set(excused_pids)
    effects = ledger.effects()
    exec_steps = {e.step: e for e in effects if e.kind == "execute"}
    comp_keys: dict[str, set[str]] = defaultdict(set)
    for e in effects:
        if e.kind == "compensate":
            comp_keys[e.step].add(e.key)
    comp_calls: dict[str, list[Any]] = defaultdict(list)
    for c in ledger.calls("compensate"):
        comp_calls[c.step].append(c)
    reports: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    for run_id, at, report in ledger.reports():
        reports[run_id].append((at, report))

    if run_ids is None:
        wanted = sorted({s.rsplit(":", 1)[0] for s in exec_steps} | set(reports))
    else:
        wanted = list(run_ids)
    for run_id in wanted:
        run = journal.get_run(run_id)
        if run is None or not run.condemned:
            continue
        verdict.runs += 1
        records = {r.suffix: r for r in journal.list_records(run_id)}
        seq = {s: r.seq for s, r in records.items()}
        run_steps = {s for s in exec_steps if s.rsplit(":", 1)[0] == run_id}
        verdict.steps += len([r for r in records.values() if r.status is not RecordStatus.DENIED])

        # Effects of this run the unwind never knew about: claimed after the tombstone.
        if reports[run_id]:
            first = {e["suffix"] for e in reports[run_id][0][1]["entries"]}
            for step in sorted(run_steps):
                if step.rsplit(":", 1)[1] not in first:
                    verdict.after_tombstone.append(
                        f"{step}: executed, absent from the first report after the tombstone"
                    )
        for step in sorted(run_steps):
            if settled and not comp_keys.get(step):
                verdict.lost.append(f"{step}: executed and never compensated")
        for step, keys in comp_keys.items():
            if step.rsplit(":", 1)[0] != run_id:
                continue
            suffix = step.rsplit(":", 1)[1]
            canonical = compensate_key(records[suffix].origin_run_id if suffix in records else run_id, suffix)
            if len(keys) > 1 or keys != {canonical}:
                verdict.double.append(f"{step}: undone under keys {sorted(keys)} (stable key {canonical})")
            if step not in exec_steps:
                verdict.mismatches.append(f"{step}: compensated although it never executed")
            claim = journal.get_claim(records[suffix].origin_run_id if suffix in records else run_id, suffix)
            if settled and (claim is None or claim.status is not ClaimStatus.COMPENSATED):
                said = "no claim" if claim is None else claim.status.value
                verdict.mismatches.append(f"{step}: the provider has undone it, the journal says {said}")
        for step, calls in comp_calls.items():
            if step.rsplit(":", 1)[0] != run_id:
                continue
            verdict.calls_per_step.append(len(calls))
            live = [c for c in calls if c.pid not in excused]
            for a, b in zip(live, live[1:], strict=False):
                if a.ended_at is not None and b.started_at < a.ended_at and a.outcome != "raised":
                    verdict.double.append(
                        f"{step}: two compensate calls in flight at once (pids {a.pid}, {b.pid})"
                    )

        for at, report in reports[run_id]:
            verdict.reports += 1
            verdict.mismatches += _judge_report(run_id, at, report, seq, exec_steps, comp_keys)
    return verdict


def _judge_report(
    run_id: str,
    at: float,
    report: dict[str, Any],
    seq: dict[str, int],
    exec_steps: dict[str, Any],
    comp_keys: dict[str, set[str]],
) -> list[str]:
    wrong: list[str] = []
    entries = report["entries"]
    if not report.get("condemned"):
        wrong.append(f"{run_id}: report says the run is not condemned")
    order = [seq.get(e["suffix"], -1) for e in entries]
    if order != sorted(order, reverse=True) or -1 in order:
        wrong.append(f"{run_id}: entries not in reverse execution order or unknown to the journal: {order}")
    halted = False
    halted_group = None  # a parallel unwind attempts every step of the group where it halted
    for e in entries:
        step, status = f"{e['origin_run_id']}:{e['suffix']}", e["status"]
        where = f"{run_id} {e['suffix']} ({status})"
        if e["idempotency_key"] != compensate_key(e["origin_run_id"], e["suffix"]):
            wrong.append(f"{where}: key {e['idempotency_key']} is not the stable key")
        if halted and status != "not-attempted" and e.get("group") != halted_group:
            wrong.append(f"{where}: a step after a halting one was attempted")
        if not halted and status == "not-attempted":
            wrong.append(f"{where}: not-attempted without a halting step before it")
        if status in ("compensated", "already-compensated") and not comp_keys.get(step):
            wrong.append(f"{where}: reported undone, the provider has no compensation effect")
        executed = exec_steps.get(step)
        if status == "skipped-not-executed" and executed is not None and executed.applied_at < at:
            wrong.append(f"{where}: reported not executed, the provider had its effect")
        if status in ("failed", "uncertain") and not e.get("error"):
            wrong.append(f"{where}: no error says why")
        if not halted and status in HALTING:
            halted, halted_group = True, e.get("group")
    return wrong
