"""The soak: many condemned runs through real Celery workers while faults of every kind land, then
the checker over all of it and a table of figures (issue 5). Sized by ``SAGA_SOAK_RUNS`` (1,000) and
``SAGA_SOAK_STEPS`` (5 steps a run) for a 2-core machine: about 20 minutes."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from saga_worker import Journal
from saga_worker.journal.records import ClaimStatus

from .checker import Verdict, check
from .deployment import Deployment
from .harness import OwnPostgres, arm, child, fired, start_run
from .ledger import Ledger

POINT_KILLS = ["after_claim", "before_hook", "after_hook", "after_outcome", "before_ack"]
POINT_KINDS = ("mid-hook kill", "kill at a point", "SIGSTOP past lease")


@dataclass
class Plan:
    runs: int = int(os.environ.get("SAGA_SOAK_RUNS", "1000"))
    steps: int = int(os.environ.get("SAGA_SOAK_STEPS", "5"))
    in_flight: int = 24  # runs sent and not yet complete
    mid_hook_kills: int = 125
    point_kills: int = 40
    stops: int = 55  # SIGSTOP past the lease, then SIGCONT: lock/lease expiries
    broker_restarts: int = 11
    db_restarts: int = 11
    duplicate_share: float = 0.06  # the same message twice
    concurrent_share: float = 0.05  # two compensate_run requests at once
    live_runs: int = 20  # condemned while a call executes in another process
    settle_s: float = 240.0

    def __post_init__(self) -> None:
        """A smaller soak (``SAGA_SOAK_RUNS`` under 1,000) gets proportionally fewer faults."""
        scale = min(1.0, self.runs / 1000)
        for name in ("mid_hook_kills", "point_kills", "stops", "broker_restarts", "db_restarts", "live_runs"):
            setattr(self, name, max(1, round(getattr(self, name) * scale)))


@dataclass
class Figures:
    runs: int = 0
    steps: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    attention: int = 0
    unfinished: int = 0
    seconds: float = 0.0

    def bump(self, kind: str, n: int = 1) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + n


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; 0 when there are none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Soak:
    def __init__(
        self, dep: Deployment, pg: OwnPostgres, journal: Journal, ledger: Ledger, plan: Plan
    ) -> None:
        self.dep, self.pg, self.journal, self.ledger, self.plan = dep, pg, journal, ledger, plan
        self.fig = Figures()
        self.rng = random.Random(int(os.environ.get("SAGA_SOAK_SEED", "5")))
        self.pending: dict[str, float] = {}  # run id -> sent at
        self.results: list[tuple[str, Any]] = []
        self.stopped: list[tuple[int, float]] = []  # (pid, resume at)
        self.clears: dict[str, float] = {}  # step key -> when its fault cleared
        self.restart_clears: list[tuple[float, list[tuple[str, str]]]] = []
        self.live: list[tuple[str, Any, bool]] = []
        self.seen_fired = 0
        self.all_runs: list[str] = []
        self.crashes: list[str] = []

    # -- driving --------------------------------------------------------------------------------------
    def run(self) -> Figures:
        """Start runs (at most ``in_flight`` unfinished at once) and land each fault when the run count
        reaches its turn, so every fault meets work in flight; then settle and judge."""
        began = time.monotonic()
        plan = self.plan
        made = 0
        schedule = self._schedule()
        while made < plan.runs or (self.pending and time.monotonic() - began < plan.settle_s * 4):
            while schedule and schedule[0][0] <= made:
                _, kind = schedule.pop(0)
                self._inject(kind)
            self._resume_stopped()
            self._note_fired()
            self._supervise()
            if made < plan.runs and len(self.pending) < plan.in_flight:
                made += self._start_one(made)
            self._poll_live()
            self._poll_pending()
            time.sleep(0.01)
        self._settle()
        self.fig.seconds = time.monotonic() - began
        return self.fig

    def _schedule(self) -> list[tuple[float, str]]:
        """(run index, fault kind): point faults at random turns, restarts evenly spaced and apart."""
        p = self.plan
        kinds = (
            ["mid-hook kill"] * p.mid_hook_kills
            + ["kill at a point"] * p.point_kills
            + ["SIGSTOP past lease"] * p.stops
            + ["live run condemned"] * p.live_runs
        )
        out = [(self.rng.uniform(2, p.runs * 0.97), k) for k in kinds]
        restarts = ["broker restart"] * p.broker_restarts + ["database restart"] * p.db_restarts
        self.rng.shuffle(restarts)
        gap = p.runs * 0.9 / max(1, len(restarts))
        out += [(5 + i * gap, k) for i, k in enumerate(restarts)]
        return sorted(out)

    def _start_one(self, index: int) -> int:
        run_id = f"soak-{index}-{uuid.uuid4().hex[:6]}"
        # The database may go down mid-run: its records then say what is known; condemn it anyway.
        with contextlib.suppress(Exception):
            start_run(self.journal, run_id, self.plan.steps, comp_sleep=0.05 if index % 3 else 0.3)
        self._condemn(run_id)
        return 1

    def _condemn(self, run_id: str) -> None:
        self.all_runs.append(run_id)
        self.pending[run_id] = time.monotonic()
        roll = self.rng.random()
        try:
            if roll < self.plan.duplicate_share:
                task_id = str(uuid.uuid4())
                self.results.append((run_id, self.dep.send(run_id, task_id=task_id)))
                self.dep.send(run_id, task_id=task_id)
                self.fig.bump("duplicate message")
            elif roll < self.plan.duplicate_share + self.plan.concurrent_share:
                self.results.append((run_id, self.dep.send(run_id)))
                self.dep.send(run_id)
                self.fig.bump("concurrent condemn")
            else:
                self.results.append((run_id, self.dep.send(run_id)))
        except Exception:
            pass  # the broker is down: the tombstone is not written; the run is sent again below
        self.fig.runs += 1

    def _poll_pending(self) -> None:
        if not self.pending or self.rng.random() > 0.2:
            return
        try:
            for run_id in list(self.pending):
                run = self.journal.get_run(run_id)
                if run is None or not run.condemned:
                    if (
                        time.monotonic() - self.pending[run_id] > 15
                    ):  # the request was lost before the tombstone
                        self.pending[run_id] = time.monotonic()
                        with contextlib.suppress(Exception):
                            self.results.append((run_id, self.dep.send(run_id)))
                    continue
                if run.unwind_state.value in ("complete", "attention"):
                    del self.pending[run_id]
        except Exception:
            return  # the database is restarting

    # -- faults ---------------------------------------------------------------------------------------
    def _inject(self, kind: str) -> None:
        self.fig.bump(kind)
        if kind == "mid-hook kill":
            arm(self.dep.fault_dir, "mid_hook=kill")
        elif kind == "kill at a point":
            arm(self.dep.fault_dir, f"{self.rng.choice(POINT_KILLS)}=kill")
        elif kind == "SIGSTOP past lease":
            arm(self.dep.fault_dir, "before_hook=stop")
        elif kind == "broker restart":
            in_flight = self._claimed()
            print(f"broker restart at {time.time():.3f}", flush=True)
            self.dep.redis.persistent = not self.dep.redis.persistent  # with and without AOF, in turn
            self.dep.redis.restart(down_for=1.0)
            self.restart_clears.append((time.time(), in_flight))
        elif kind == "database restart":
            in_flight = self._claimed()
            print(f"database restart at {time.time():.3f}", flush=True)
            self.pg.restart(down_for=1.0)
            self.restart_clears.append((time.time(), in_flight))
        elif kind == "live run condemned":
            run_id = f"soak-live-{uuid.uuid4().hex[:8]}"
            env = {**self.dep.env(), "SAGA_FAULTS": f"mid_execute=sleep:1.5@{run_id}:call-3"}
            env.pop("SAGA_FAULTS_DIR", None)
            proc = child("run", run_id, env=env, extra=["--steps", str(self.plan.steps)])
            self.live.append((run_id, proc, False))

    def _supervise(self) -> None:
        if self.rng.random() > 0.05:
            return
        for crash in self.dep.supervise():
            self.fig.bump("worker crashed and was restarted by the supervisor")
            self.crashes.append(crash)

    def _claimed(self) -> list[tuple[str, str]]:
        try:
            runs = list(self.pending)
            out = []
            for run_id in runs:
                for r in self.journal.list_records(run_id):
                    c = self.journal.get_claim(r.origin_run_id, r.suffix)
                    if c is not None and c.status is ClaimStatus.CLAIMED:
                        out.append((r.origin_run_id, r.suffix))
            return out
        except Exception:
            return []

    def _note_fired(self) -> None:
        events = fired(self.dep.fault_dir)
        for at, pid, _point, action, key in events[self.seen_fired :]:
            if action == "stop":
                self.stopped.append((pid, time.monotonic() + 2.0 * 1.5))  # past a 2 s lease
            else:
                self.clears[key] = at
        self.seen_fired = len(events)

    def _resume_stopped(self) -> None:
        now = time.monotonic()
        for pid, at in list(self.stopped):
            if at <= now:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                self.stopped.remove((pid, at))
                for _, fpid, _, action, key in fired(self.dep.fault_dir):
                    if fpid == pid and action == "stop":
                        self.clears.setdefault(key, time.time())

    def _poll_live(self) -> None:
        for i, (run_id, proc, sent) in enumerate(list(self.live)):
            if sent:
                continue
            started = self.rng.random() < 0.1 and self.ledger.count_calls(f"{run_id}:call-3") > 0
            if started or proc.popen.poll() is not None:
                self._condemn(run_id)
                self.live[i] = (run_id, proc, True)

    # -- the end --------------------------------------------------------------------------------------
    def _settle(self) -> None:
        deadline = time.monotonic() + self.plan.settle_s
        for path in self.dep.fault_dir.iterdir():  # faults armed that found nothing to hit: disarm
            if path.name.startswith("f") and ".fired-" not in path.name and path.name != "fired.log":
                path.unlink(missing_ok=True)
        for pid, _ in self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for run_id, proc, sent in self.live:
            with contextlib.suppress(Exception):
                proc.wait(timeout=60)
            if not sent:
                self._condemn(run_id)
        while time.monotonic() < deadline:
            self._supervise()
            self._poll_pending_all()
            if not self.pending:
                break
            time.sleep(1.0)
        for run_id, result in self.results:
            with contextlib.suppress(Exception):
                if result.ready() and result.successful():
                    self.ledger.add_report(run_id, result.get(timeout=1))

    def _poll_pending_all(self) -> None:
        with contextlib.suppress(Exception):
            for run_id in list(self.pending):
                run = self.journal.get_run(run_id)
                if run is not None and run.unwind_state.value in ("complete", "attention"):
                    del self.pending[run_id]

    def verdict(self) -> Verdict:
        pids = [f[1] for f in fired(self.dep.fault_dir)]
        verdict = check(self.ledger, self.journal, self.all_runs, excused_pids=pids)
        self.fig.steps = verdict.steps
        self.fig.unfinished = len(self.pending)
        self.fig.attention = sum(
            1
            for r in self.all_runs
            if (run := self.journal.get_run(r)) is not None and run.unwind_state.value == "attention"
        )
        # Re-drive latency: from a fault clearing to the step's outcome written (journal clock).
        for key, cleared in self.clears.items():
            origin, _, suffix = key.partition(":comp:")
            claim = self.journal.get_claim(origin, suffix) if origin else None
            if claim is not None and claim.finished_at is not None:
                self.fig.latencies.append(max(0.0, claim.finished_at - cleared))
        for back, steps in self.restart_clears:
            for origin, suffix in steps:
                claim = self.journal.get_claim(origin, suffix)
                if claim is not None and claim.finished_at is not None:
                    self.fig.latencies.append(max(0.0, claim.finished_at - back))
        return verdict

    def diagnose(self, verdict: Verdict) -> str:
        """What the journal and the ledger say about every run the checker faulted, for the failure message."""
        bad = sorted(
            {
                item.split(":", 1)[0]
                for item in verdict.lost + verdict.double + verdict.after_tombstone + verdict.mismatches
            }
        )
        lines = []
        for run_id in bad[:5]:
            run = self.journal.get_run(run_id)
            lines.append(f"== {run_id}: {run}")
            for r in self.journal.list_records(run_id):
                lines.append(
                    f"   record {r.suffix} seq={r.seq} {r.status.value} created={r.created_at:.3f} "
                    f"updated={r.updated_at:.3f} attempts={r.attempts}"
                )
                lines.append(f"   claim {self.journal.get_claim(r.origin_run_id, r.suffix)}")
            for c in self.ledger.calls():
                if c.step.startswith(run_id + ":"):
                    lines.append(
                        f"   call {c.kind} {c.key} pid={c.pid} {c.started_at:.3f}-{c.ended_at} {c.outcome}"
                    )
            for rid, at, report in self.ledger.reports():
                if rid == run_id:
                    lines.append(
                        f"   report at {at:.3f}: {[(e['suffix'], e['status']) for e in report['entries']]}"
                    )
        lines += [f"   fault {f}" for f in fired(self.dep.fault_dir)]
        lines += [
            f"   restart back at {back:.3f}, claimed then: {steps}" for back, steps in self.restart_clears
        ]
        return "\n".join(lines)

    def table(self, verdict: Verdict) -> str:
        mean, peak = verdict.calls_mean_max()
        rows: list[tuple[str, int | str]] = [("runs condemned", self.fig.runs), ("steps", self.fig.steps)]
        landed: dict[str, int] = {}
        for _, _, point, action, _ in fired(self.dep.fault_dir):
            name = {"kill": "SIGKILL of a pool child", "stop": "SIGSTOP past the lease"}[action]
            landed[f"{name} at {point}"] = landed.get(f"{name} at {point}", 0) + 1
        rows += [(f"fault: {k}", v) for k, v in sorted(landed.items())]
        rows += [
            (f"fault: {k}", v)
            for k, v in sorted(self.fig.faults.items())
            if k not in ("mid-hook kill", "kill at a point", "SIGSTOP past lease")
        ]
        rows += [
            (
                "faults armed at points / landed",
                f"{sum(self.fig.faults.get(k, 0) for k in POINT_KINDS)}/{sum(landed.values())}",
            ),
            ("lost compensations", len(verdict.lost)),
            ("double effects", len(verdict.double)),
            ("effects after tombstone", len(verdict.after_tombstone)),
            ("report mismatches", len(verdict.mismatches)),
            ("reports checked", verdict.reports),
            ("raw hook calls per step (mean)", f"{mean:.3f}"),
            ("raw hook calls per step (max)", peak),
            ("re-drives measured", len(self.fig.latencies)),
            ("re-drive latency p50 (s)", f"{percentile(self.fig.latencies, 0.5):.2f}"),
            ("re-drive latency p99 (s)", f"{percentile(self.fig.latencies, 0.99):.2f}"),
            ("re-drive latency max (s)", f"{max(self.fig.latencies, default=0.0):.2f}"),
            ("runs flagged attention", self.fig.attention),
            ("runs unfinished at the end", self.fig.unfinished),
            ("wall time (s)", f"{self.fig.seconds:.0f}"),
        ]
        width = max(len(k) for k, _ in rows)
        line = "+" + "-" * (width + 2) + "+" + "-" * 12 + "+"
        body = [f"| {k:<{width}} | {v!s:>10} |" for k, v in rows]
        return "\n".join([line, *body, line])


_ = (Path, statistics)
