"""The fleet's client: ``python -m tests.fleet.drive`` inside the ``client`` namespace (``tests.fleet``
starts it there). It brings up the hosts' servers and workers, keeps runs flowing (each run executes
its steps here, then is condemned with ``compensate_run`` sent through the broker, as an app does),
lands every fault kind in turn while unwinds are in flight, settles, judges with the fault suite's
checker over the provider's ledger, and prints the per-kind table and one ``fleet:`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from saga_worker import Journal, open_journal
from saga_worker.celery import make_app
from saga_worker.journal.records import ClaimStatus
from saga_worker.settings import SagaSettings
from tests.faults.checker import Verdict, check
from tests.faults.harness import start_grouped_run, start_run
from tests.faults.ledger import Ledger
from tests.faults.soak import percentile

from .faults import KINDS, Faults, Landed
from .hosts import DEFAULT_TIMING, FLEET_TIMING, SKEW_S, SKEWED, Fleet, namespace_pids
from .network import HOSTS, Network

SLOW_S = 10.0  # an unwind slower than this after its fault gets its timeline printed
SKEW_KIND = f"clock skew (+{SKEW_S} s on {SKEWED})"


@dataclass
class Plan:
    runs: int
    repeats: int  # of each fault kind
    steps: int = 4
    in_flight: int = 12
    seed: int = 46
    settle_s: float = 180.0

    @property
    def limit_s(self) -> float:
        """The drive's bound: room for every fault, each with its hold and the wait for its unwinds."""
        return 600.0 + 20.0 * self.repeats * len(KINDS)


@dataclass
class Heal:
    """One fault's effect on the runs it met: when each could first be finished again (the later of
    the heal and every lease or sweep hold it left), by run."""

    landed: Landed
    reference: dict[str, float] = field(default_factory=dict)


class Drive:
    def __init__(self, fleet: Fleet, net: Network, journal: Journal, ledger: Ledger, plan: Plan) -> None:
        self.fleet, self.net, self.journal, self.ledger, self.plan = fleet, net, journal, ledger, plan
        self.rng = random.Random(plan.seed)
        self.faults = Faults(fleet, net, ledger, self.rng)
        # How long the next fault waits for the last one's unwinds: past a sweep hold and a backoff.
        self.recover_cap_s = 30.0 + 4 * self.faults.claim_ttl
        self.pending: dict[str, float] = {}
        self.all_runs: list[str] = []
        self.task_ids: dict[str, list[str]] = {}  # run id -> the compensate_run task ids sent for it
        self.parallel: set[str] = set()  # runs with a group, unwound with parallel=True
        self.to_collect: list[tuple[float, int, str]] = []  # (when, tries, run id): reports to keep
        self.reports_app = make_app(SagaSettings(**fleet.dep.saga()), main="fleet-reports")  # type: ignore[arg-type]  # strings, as the environment gives them
        self.heals: list[Heal] = []
        self.resent: set[str] = set()  # condemn requests lost before their tombstone, sent again
        self.host_of: dict[int, str] = {}
        self.crashes: list[str] = []
        self.slow: list[str] = []
        self.from_heal: list[float] = []  # the same unwinds, timed from the heal alone
        self.began = time.monotonic()

    # -- runs ---------------------------------------------------------------------------------------
    def start_one(self, index: int) -> None:
        run_id = f"fleet-{index}-{uuid.uuid4().hex[:6]}"
        comp_sleep = 0.05 if index % 3 else 0.3
        # One run in four records its middle calls as one group and is unwound with parallel=True:
        # the group's steps go out as step tasks side by side, across both worker hosts.
        grouped = index % 4 == 1 and self.plan.steps >= 4
        with contextlib.suppress(Exception):  # the journal may be restarting: condemn what is there
            if grouped:
                start_grouped_run(self.journal, run_id, self.plan.steps - 2, comp_sleep=comp_sleep)
            else:
                start_run(self.journal, run_id, self.plan.steps, comp_sleep=comp_sleep)
        if grouped:
            self.parallel.add(run_id)
        self.all_runs.append(run_id)
        self.pending[run_id] = time.monotonic()
        self.send(run_id)

    def send(self, run_id: str) -> None:
        with contextlib.suppress(Exception):  # the broker is down: sent again by poll()
            sent = self.fleet.dep.send(run_id, parallel=run_id in self.parallel)
            self.task_ids.setdefault(run_id, []).append(str(sent.id))

    def poll(self) -> None:
        with contextlib.suppress(Exception):
            for run_id in list(self.pending):
                run = self.journal.get_run(run_id)
                if run is None or not run.condemned:
                    if time.monotonic() - self.pending[run_id] > 15:  # lost before its tombstone
                        self.pending[run_id] = time.monotonic()
                        self.resent.add(run_id)
                        self.send(run_id)
                    continue
                if run.unwind_state.value in ("complete", "attention"):
                    del self.pending[run_id]
                    self.to_collect.append((time.monotonic() + 1.0, 0, run_id))

    def note_hosts(self) -> None:
        for name in ("worker-a", "worker-b"):
            for pid in namespace_pids(HOSTS[name].ns):
                self.host_of[pid] = name

    def supervise(self) -> None:
        with contextlib.suppress(Exception):
            self.crashes += self.fleet.dep.supervise()

    # -- faults -------------------------------------------------------------------------------------
    def references(self, landed: Landed, runs: list[str]) -> Heal:
        heal = Heal(landed)
        for run_id in runs:
            ref = landed.healed
            with contextlib.suppress(Exception):
                run = self.journal.get_run(run_id)
                if run is not None and run.unwind_next_at is not None:
                    ref = max(ref, run.unwind_next_at)
                for r in self.journal.list_records(run_id):
                    claim = self.journal.get_claim(r.origin_run_id, r.suffix)
                    if claim is not None and claim.status is ClaimStatus.CLAIMED:
                        ref = max(ref, claim.lease_expires_at)
            heal.reference[run_id] = ref
        return heal

    def run(self) -> None:
        plan = self.plan
        schedule = [k for k in KINDS for _ in range(plan.repeats)]
        self.rng.shuffle(schedule)
        made = 0
        active: tuple[Landed, float, Callable[[], None], list[str]] | None = None
        gap_until = time.monotonic() + 3.0
        recovering: set[str] = set()
        recover_until = 0.0
        last_note = 0.0
        while time.monotonic() - self.began < plan.limit_s:
            now = time.monotonic()
            if now - last_note > 1.0:
                self.note_hosts()
                self.supervise()
                self.poll()
                self.collect()
                last_note = now
            if active is not None and now >= active[1]:
                landed, _, heal, met = active
                heal()
                landed.healed = time.time()
                self.heals.append(self.references(landed, [r for r in met if r in self.pending]))
                print(
                    f"  {landed.kind} on {landed.target}: healed after {landed.healed - landed.began:.1f} s",
                    flush=True,
                )
                # The next fault waits until the unwinds this one met are over (at most recover_cap_s),
                # so each unwind's time is its own fault's, then 1-3 s more.
                recovering, recover_until = set(self.heals[-1].reference), now + self.recover_cap_s
                active, gap_until = None, now + self.rng.uniform(1.0, 3.0)
            elif (
                active is None
                and schedule
                and now >= gap_until
                and self.pending
                and (now >= recover_until or not recovering & set(self.pending))
            ):
                met = list(self.pending)
                landed, hold, heal = self.faults.apply(schedule.pop())
                active = (landed, time.monotonic() + hold, heal, met)
            if len(self.pending) < plan.in_flight and (made < plan.runs or schedule or active):
                self.start_one(made)
                made += 1
            elif active is None and not schedule and made >= plan.runs:
                break
            time.sleep(0.01)
        self.settle()

    def settle(self) -> None:
        self.net.heal_all()
        deadline = time.monotonic() + self.plan.settle_s
        while self.pending and time.monotonic() < deadline:
            self.note_hosts()
            self.supervise()
            self.poll()
            self.collect()
            time.sleep(1.0)
        self.collect(final=True)
        with contextlib.suppress(Exception):
            self.reports_app.close()

    def collect(self, final: bool = False) -> None:
        """Keep the report of every unwind that ended a moment ago (its last step stores it under the
        client's task id), read from the result backend as it is then: a later Redis restart without
        its data would lose it. A fresh Celery app reads it: the client's own result consumer gives up
        after a Redis restart ("the Celery application must be restarted")."""
        now, later = time.monotonic(), []
        for due, tries, run_id in self.to_collect:
            if due > now and not final:
                later.append((due, tries, run_id))
                continue
            found = False
            for task_id in self.task_ids.get(run_id, []):
                with contextlib.suppress(Exception):
                    meta = self.reports_app.backend.get_task_meta(task_id)
                    if meta.get("status") == "SUCCESS" and isinstance(meta.get("result"), dict):
                        self.ledger.add_report(run_id, meta["result"])
                        found = True
            if not found and tries < 3 and not final:
                later.append((now + 2.0, tries + 1, run_id))
        self.to_collect = later

    # -- judging ------------------------------------------------------------------------------------
    def latencies(self) -> dict[str, list[float]]:
        """Seconds from the reference (heal, lease, hold) of the last fault each unwind met to its
        end, by that fault's kind. An unwind whose condemn request was lost before its tombstone (with
        the broker) and sent again by the client is not counted: no unwind existed to heal."""
        last: dict[str, tuple[Heal, float]] = {}
        for heal in self.heals:
            for run_id, ref in heal.reference.items():
                last[run_id] = (heal, ref)
        out: dict[str, list[float]] = {}
        for run_id, (heal, ref) in last.items():
            if run_id in self.resent:
                continue
            finished = [
                c.finished_at
                for r in self.journal.list_records(run_id)
                if (c := self.journal.get_claim(r.origin_run_id, r.suffix)) is not None and c.finished_at
            ]
            if finished:
                out.setdefault(heal.landed.kind, []).append(max(0.0, max(finished) - ref))
                self.from_heal.append(max(0.0, max(finished) - heal.landed.healed))
                if max(finished) - ref > SLOW_S:
                    self.slow.append(self.timeline(run_id, heal, ref))
        return out

    def timeline(self, run_id: str, heal: Heal, ref: float) -> str:
        """What the journal says of an unwind that took long after its fault, times from the fault."""
        t0 = heal.landed.began
        run = self.journal.get_run(run_id)
        lines = [
            f"slow: {run_id} after {heal.landed.kind} on {heal.landed.target} (healed +{heal.landed.healed - t0:.1f} s, "
            f"reference +{ref - t0:.1f} s); unwind attempts {run.unwind_attempts if run else '?'}"
        ]
        for r in self.journal.list_records(run_id):
            c = self.journal.get_claim(r.origin_run_id, r.suffix)
            if c is not None:
                end = f"+{c.finished_at - t0:.1f}" if c.finished_at else "-"
                lines.append(
                    f"   {r.suffix}: claimed +{c.started_at - t0:.1f} s finished {end} s attempts {c.attempts} {c.status.value}"
                )
        return "\n".join(lines)

    def skew_handovers(self) -> int:
        """Steps whose compensate hook ran on both the skewed worker and the other one: a lease judged
        by two clocks that disagree by more than its length."""
        hosts: dict[str, set[str]] = {}
        for c in self.ledger.calls("compensate"):
            hosts.setdefault(c.step, set()).add(self.host_of.get(c.pid, "?"))
        return sum(1 for h in hosts.values() if {"worker-a", "worker-b"} <= h)

    def report(self) -> tuple[Verdict, str]:
        excused = [pid for heal in self.heals for pid in heal.landed.excused]
        verdict = check(self.ledger, self.journal, self.all_runs, excused_pids=excused)
        counts: dict[str, int] = {}
        mid: dict[str, int] = {}
        for heal in self.heals:
            counts[heal.landed.kind] = counts.get(heal.landed.kind, 0) + 1
            mid[heal.landed.kind] = mid.get(heal.landed.kind, 0) + int(heal.landed.mid_step)
        counts[SKEW_KIND] = self.skew_handovers()
        by_kind = self.latencies()
        lat = [x for values in by_kind.values() for x in values]
        unfinished = len(self.pending)
        attention = sum(
            1
            for r in self.all_runs
            if (run := self.journal.get_run(r)) is not None and run.unwind_state.value == "attention"
        )
        lines = [
            "settings: " + " ".join(f"SAGA_{k.upper()}={v}" for k, v in self.fleet.timing.items()) + "; "
            "2 workers x prefork 2, beat on worker-a",
            f"runs driven: {len(self.all_runs)}; steps: {verdict.steps}; reports checked: {verdict.reports}; "
            f"raw compensate calls per step: mean {verdict.calls_mean_max()[0]:.3f}, max {verdict.calls_mean_max()[1]}",
        ]
        for kind in (*KINDS, SKEW_KIND):
            extra = (
                f" (mid-step {mid[kind]})"
                if kind in mid
                and kind in ("partition from PostgreSQL", "partition from Redis", "frozen host")
                else ""
            )
            met = by_kind.get(kind, [])
            timing = (
                f"; unwinds it met {len(met)}, p50 {percentile(met, 0.5):.2f} s, p99 {percentile(met, 0.99):.2f} s"
                if met
                else ""
            )
            lines.append(f"fault: {kind}: {counts.get(kind, 0)}{extra}{timing}")
        lines += [
            f"unwinds measured after a heal: {len(lat)}; p50 {percentile(lat, 0.5):.2f} s, p99 {percentile(lat, 0.99):.2f} s, "
            f"max {max(lat, default=0.0):.2f} s (from the later of the heal and the leases and holds it left); "
            f"from the heal alone p50 {percentile(self.from_heal, 0.5):.2f} s, p99 {percentile(self.from_heal, 0.99):.2f} s",
            f"condemn requests lost with the broker before their tombstone, sent again by the client: {len(self.resent)}",
            f"runs with a group, unwound with parallel=True: {len(self.parallel)}",
            f"runs flagged attention: {attention}; unfinished: {unfinished}; worker crashes restarted: {len(self.crashes)}",
            f"wall time: {time.monotonic() - self.began:.0f} s",
        ]
        kinds = sum(1 for v in counts.values() if v)
        lines.append(
            f"fleet: runs={len(self.all_runs)} steps={verdict.steps} faults={sum(counts.values())} kinds={kinds} "
            f"lost={len(verdict.lost)} doubled={len(verdict.double)} after_tombstone={len(verdict.after_tombstone)} "
            f"mismatches={len(verdict.mismatches)} heal_p99_s={percentile(lat, 0.99):.2f}"
            + (f" unfinished={unfinished}" if unfinished else "")
        )
        return verdict, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--defaults", action="store_true", help="saga-worker's default timing settings")
    parser.add_argument(
        "--break", dest="breaks", default="", help="tests/faults/breaks.py names, comma-separated"
    )
    args = parser.parse_args()
    plan = Plan(runs=args.runs, repeats=args.repeats, seed=args.seed)
    fleet, net = Fleet(timing=dict(DEFAULT_TIMING if args.defaults else FLEET_TIMING)), Network()
    journal: Journal | None = None
    code = 1
    # The app runs under the fleet's settings too: its SAGA_CLAIM_TTL is the execute lease of the
    # calls it runs, which an unwind waits out when a fault cut the app off mid-execute.
    os.environ.update({f"SAGA_{k.upper()}": v for k, v in fleet.timing.items()})
    try:
        fleet.start()
        os.environ["FAULT_LEDGER_URL"] = fleet.ledger_pg.url  # the client's own execute hooks report there
        ledger = Ledger(fleet.ledger_pg.url)
        ledger.setup()
        journal = open_journal(fleet.journal_pg.url, migrate=True)
        fleet.start_workers(args.breaks)
        print(f"fleet up: journal {fleet.journal_pg.url}, redis {fleet.dep.redis.url}", flush=True)
        drive = Drive(fleet, net, journal, ledger, plan)
        drive.run()
        verdict, text = drive.report()
        if not verdict.clean:
            print(verdict.summary(), flush=True)
        for slow in drive.slow[:8]:
            print(slow, flush=True)
        for crash in drive.crashes[:3]:
            print("worker crash (restarted):\n" + crash, flush=True)
        print(text, flush=True)
        code = 0
    finally:
        with contextlib.suppress(Exception):
            net.heal_all()
        if journal is not None:
            with contextlib.suppress(Exception):
                journal.close()
        fleet.close()
    # Exit at once: the Celery client's pending results would try, at interpreter exit, to unsubscribe
    # from a Redis the fleet has just stopped, and print a traceback under the ``fleet:`` line.
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
