"""The rolling upgrade under faults (issue 51): ``python -m tests.fleet.rolling --previous ROOT`` inside
the ``client`` namespace (``python -m tests.fleet.upgrade`` builds the previous release and starts it
there). The fleet of tests/fleet, with workers of the previous release and of the current code serving
one queue, in the order docs/guides/upgrading.md gives operators:

1. the journal at the previous release's head, its workers on ``worker-a`` (beat) and ``worker-b``
   (skewed clock), its client starting runs, until every pool child of theirs has served a step
   (so each opened its journal: a 0.1.0 process refuses a journal migrated past it once it opens);
2. the expand migration (the current code's Alembic head, short of any contract migration) run
   while the previous release's unwinds are in flight;
3. workers of the current code started beside the old ones on both hosts; runs from clients of
   both releases; the fleet's faults land (tests/fleet/faults.py);
4. the old workers stopped one by one (a warm shutdown): ``worker-b``'s at a third of the faults,
   ``worker-a``'s (and its beat: beat rolls to a current worker on ``worker-a``) at two thirds,
   and the old client with it;
5. the contract migration, only once no process of the previous release is left (none answers a
   ping on the broker); with no contract migration at the head it is a no-op, still sequenced and
   checked; the remaining faults land on the current fleet.

The fault suite's checker judges over the provider's ledger as in ``make fleet``; the output ends
with the ``upgrade:`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from saga_worker import Journal, open_journal
from saga_worker.journal import migrate
from tests.faults.harness import REPO, wait_for
from tests.faults.ledger import Ledger
from tests.upgrade.previous import PREVIOUS_TAG, Release
from tests.worker_process import WorkerProcess

from .drive import Drive, Plan
from .faults import KINDS
from .hosts import FLEET_TIMING, SKEWED, STATE, Fleet, namespace_pids
from .network import HOSTS, Network

CLIENT_SCRIPT = Path(__file__).with_name("previous_client.py")
WARM_STOP_S = 60.0  # a warm shutdown's bound (running hooks finish); past it the worker is killed
RECEIVED = re.compile(rb"Task (saga\.\w+)\[[^\]]*\] received")
UNREGISTERED = b"Received unregistered task"


# -- migrations --------------------------------------------------------------------------------------
def contract_revisions(directory: Path = migrate.MIGRATIONS) -> list[str]:
    """The contract migrations in ``directory`` (a module sets ``contract = True``): they drop or
    narrow what the previous release still uses, so they run only once none of its processes is
    left. Oldest first."""
    scripts = ScriptDirectory(str(directory))
    return [
        s.revision for s in reversed(list(scripts.walk_revisions())) if getattr(s.module, "contract", False)
    ]


def expand_target(directory: Path = migrate.MIGRATIONS) -> str:
    """Where the expand step migrates: the head, or the revision before the first contract one."""
    scripts = ScriptDirectory(str(directory))
    contracts = contract_revisions(directory)
    if not contracts:
        head = scripts.get_current_head()
        assert head is not None
        return head
    first = scripts.get_revision(contracts[0])
    assert first is not None and isinstance(first.down_revision, str)
    return first.down_revision


def revision_of(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


def upgrade_to(url: str, revision: str) -> None:
    engine = sa.create_engine(url)
    try:
        migrate.upgrade(engine, revision)
    finally:
        engine.dispose()


# -- the two releases' processes -----------------------------------------------------------------------
class ReleaseWorker(WorkerProcess):
    """A Celery worker of one release (``release`` None: the current code) on one host."""

    def __init__(
        self,
        release: Release | None,
        env: dict[str, str],
        log: Path,
        *,
        host: str,
        beat: bool,
        concurrency: int = 2,
    ) -> None:
        self.release, self.host, self.beat, self.concurrency = release, host, beat, concurrency
        self.stopping = False
        self.base_env = env
        super().__init__(
            ["tests.faults.celery_worker"],
            env if release is None else release.env(env),
            log,
            concurrency=concurrency,
            beat=beat,
            name="cur" if release is None else "prev",
            python=sys.executable if release is None else str(release.python),
            cwd=REPO if release is None else release.tests_root,
            prefix=HOSTS[host].exec_prefix(),
        )

    @property
    def version(self) -> str:
        return "current" if self.release is None else "previous"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> set[int]:
        """The worker's processes (its main process leads their process group: pool, beat)."""
        out = set()
        for pid in namespace_pids(HOSTS[self.host].ns):
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == self.proc.pid:
                    out.add(pid)
        return out

    def warm_stop(self) -> float:
        """SIGTERM to the main process: a warm shutdown (running tasks finish, what it had reserved goes
        back to the queue), as an operator's rollout does; killed past ``WARM_STOP_S``. Seconds taken."""
        self.stopping = True
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=WARM_STOP_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self.kill()  # whatever of its group is left (a pool child that outlived its parent)
        return time.monotonic() - began

    def received(self) -> Counter[str]:
        return Counter(m.decode() for m in RECEIVED.findall(self.log.read_bytes()))

    def unregistered(self) -> int:
        return self.log.read_bytes().count(UNREGISTERED)


class PreviousClient:
    """The previous release's client (tests/fleet/previous_client.py), one process, line by line."""

    def __init__(self, release: Release, env: dict[str, str], log: Path) -> None:
        self.proc = subprocess.Popen(
            [str(release.python), str(CLIENT_SCRIPT)],
            cwd=release.tests_root,
            env=release.env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "ab"),  # noqa: SIM115 - the process's for its life
            start_new_session=True,
        )
        self.buffer = b""
        self.replies: dict[str, list[str]] = {}
        line = self._line(120.0)
        if line != "ready":
            raise RuntimeError(f"the previous release's client did not start: {line!r} (see {log})")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _line(self, timeout: float) -> str | None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode().strip()

    def request(self, line: str, run_id: str, timeout: float = 60.0) -> list[str]:
        """Send ``line``; the task ids the client answered since (for ``run_id`` and late ones)."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while run_id not in self.replies and time.monotonic() < deadline:
            reply = self._line(deadline - time.monotonic())
            if reply is None:
                break
            rid, _, task_id = reply.partition(" ")
            self.replies.setdefault(rid, []).append(task_id)
        return [t for t in self.replies.pop(run_id, []) if t and t != "-"]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


# -- the upgrade ----------------------------------------------------------------------------------------
REDIS_LOST = "Redis restarted without its data"


class LateKinds(random.Random):
    """The drive's random source, whose shuffle of the fault schedule puts ``late`` kinds last (the
    drive pops from the end): with ``--redis-after-roll`` Redis is lost only once the previous
    release's workers are gone, so they live out their turn to be stopped (a Redis loss ends their
    main process, and on the expanded journal they cannot start again: docs/guides/upgrading.md)."""

    def __init__(self, seed: int, late: set[str]) -> None:
        super().__init__(seed)
        self.late = late

    def shuffle(self, x: list[str]) -> None:  # type: ignore[override]  # the drive shuffles names only
        super().shuffle(x)
        x.sort(key=lambda kind: kind not in self.late)


@dataclass
class Upgrade:
    """What the rolling upgrade did and when (seconds from the drive's start)."""

    previous_head: str = ""
    expanded_to: str = ""
    expand_s: float = 0.0
    in_flight_at_expand: int = 0
    events: list[str] = field(default_factory=list)
    contract: list[str] = field(default_factory=list)
    contract_checked: bool = False
    rolled_forward: int = 0  # previous-release workers that crashed after the expand, restarted current
    problems: list[str] = field(default_factory=list)


class RollingDrive(Drive):
    def __init__(
        self,
        fleet: Fleet,
        net: Network,
        journal: Journal,
        ledger: Ledger,
        plan: Plan,
        release: Release,
        workers: list[ReleaseWorker],
        client: PreviousClient,
        upgrade: Upgrade,
        redis_after_roll: bool = False,
    ) -> None:
        super().__init__(fleet, net, journal, ledger, plan)
        if redis_after_roll:
            self.rng = LateKinds(plan.seed, {REDIS_LOST})
        self.release, self.workers, self.client, self.upgrade = release, workers, client, upgrade
        self.client_of: dict[str, str] = {}  # run id -> the release whose client started it
        self.version_of: dict[int, str] = {}  # pid -> the release of the worker it belongs to
        self.made = 0
        self.phase = "side by side"
        self.faults_total = plan.repeats * len(KINDS)
        self.mix = random.Random(plan.seed + 51)
        self.breaks = (
            ""  # tests/faults/breaks.py names every worker is started with (proving the checker bites)
        )

    # -- runs: half from the previous release's client while it is up --------------------------------
    def start_one(self, index: int) -> None:
        self.made = max(self.made, index + 1)
        if self.client.alive() and self.phase != "rolled" and self.mix.random() < 0.5:
            self.start_previous(f"fleet-{index}-{uuid.uuid4().hex[:6]}", 0.05 if index % 3 else 0.3)
            return
        super().start_one(index)
        self.client_of[self.all_runs[-1]] = "current"

    def start_previous(self, run_id: str, comp_sleep: float) -> None:
        self.all_runs.append(run_id)
        self.client_of[run_id] = "previous"
        self.pending[run_id] = time.monotonic()
        self.task_ids.setdefault(run_id, []).extend(self.client.request(f"{run_id} {comp_sleep}", run_id))

    def send(self, run_id: str) -> None:
        if self.client_of.get(run_id) == "previous" and self.client.alive():
            self.task_ids.setdefault(run_id, []).extend(self.client.request(f"send {run_id}", run_id))
            return
        super().send(run_id)

    # -- the roll, stepped from the drive's once-a-second round --------------------------------------
    def note_hosts(self) -> None:
        super().note_hosts()
        for worker in self.workers:
            for pid in worker.pids():
                self.version_of[pid] = worker.version

    def elapsed(self) -> str:
        return f"+{time.monotonic() - self.began:.0f} s"

    def progress(self) -> float:
        """How far the drive is: by the faults landed (the roll is spread over them), or by the runs
        made when no fault is planned."""
        if self.faults_total:
            return len(self.heals) / self.faults_total
        return self.made / max(self.plan.runs, 1)

    def supervise(self) -> None:
        for worker in list(self.workers):
            if worker.stopping or worker.alive():
                continue
            worker.stopping = True  # replaced below, once
            self.crashes.append(f"the {worker.version} worker on {worker.host}:\n{worker.tail(3)}")
            # After the expand a worker of the previous release that restarts would refuse the journal
            # (0.1.0 checks the revision when it opens it): it is rolled forward instead.
            release = None if worker.release is None or self.upgrade.expanded_to else worker.release
            if worker.release is not None and release is None:
                self.upgrade.rolled_forward += 1
                self.upgrade.events.append(
                    f"{self.elapsed()} previous worker on {worker.host} crashed: started again as a current one"
                )
            self.workers.append(self.start_worker(release, worker.host, beat=worker.beat))
        if self.phase == "side by side" and self.progress() >= 1 / 3:
            self.roll("worker-b")
            self.phase = "rolled worker-b"
        if self.phase == "rolled worker-b" and self.progress() >= 2 / 3:
            self.roll("worker-a")
            self.phase = "rolled"
            self.contract()

    def start_worker(self, release: Release | None, host: str, *, beat: bool) -> ReleaseWorker:
        return start_worker(self.fleet, release, host, beat=beat, count=len(self.workers), breaks=self.breaks)

    def roll(self, host: str) -> None:
        """Stop the previous release's worker on ``host`` (warm); its beat moves to a current worker there."""
        said = f"nothing of the previous release left to stop on {host}"
        for worker in self.workers:
            if worker.release is not None and worker.host == host and not worker.stopping:
                took = worker.warm_stop()
                self.upgrade.events.append(
                    f"{self.elapsed()} previous worker on {host} stopped (warm, {took:.1f} s)"
                )
                if worker.beat:
                    # The beat rolls: a current worker with the beat replaces the current one on the host.
                    others = [
                        w for w in self.workers if w.release is None and w.host == host and not w.stopping
                    ]
                    self.workers.append(self.start_worker(None, host, beat=True))
                    self.upgrade.events.append(f"{self.elapsed()} beat rolled to a current worker on {host}")
                    for other in others:
                        other.warm_stop()
                said = self.upgrade.events[-1]
        if said.startswith("nothing"):
            self.upgrade.events.append(f"{self.elapsed()} {said}")
        print(f"  {said}", flush=True)

    def previous_left(self) -> list[str]:
        """Processes of the previous release still up: its workers (ours, and any that answers a
        ping on the broker: named ``prev…``) and its client."""
        left = [f"worker on {w.host}" for w in self.workers if w.release is not None and w.alive()]
        if self.client.alive():
            left.append("client")
        with contextlib.suppress(Exception):
            for reply in self.reports_app.control.ping(timeout=2.0) or []:
                left += [f"worker {name} (answered a ping)" for name in reply if name.startswith("prev")]
        return left

    def contract(self) -> None:
        """The contract step: only with no process of the previous release left; then the migrations
        the expand step stopped short of (none: a no-op, said so)."""
        self.client.stop()
        self.upgrade.events.append(f"{self.elapsed()} previous client stopped")
        left = self.previous_left()
        if left:
            self.upgrade.problems.append(f"contract step reached with the previous release still up: {left}")
            return
        self.upgrade.contract_checked = True
        pending = contract_revisions()
        if pending:
            url = self.fleet.journal_pg.url
            upgrade_to(url, migrate.head_revision())
            self.upgrade.contract = pending
        said = (
            f"contract migration {', '.join(pending)}"
            if pending
            else "contract step: no contract migration at the head (no-op)"
        )
        self.upgrade.events.append(f"{self.elapsed()} {said}; no process of {self.release.tag} left")

    def settle(self) -> None:
        if self.phase == "side by side":
            self.roll("worker-b")
            self.phase = "rolled worker-b"
        if self.phase == "rolled worker-b":
            self.roll("worker-a")
            self.phase = "rolled"
            self.contract()
        super().settle()

    # -- judging -----------------------------------------------------------------------------------------
    def served(self) -> Counter[tuple[str, str]]:
        """Steps undone, by (release of the client that started the run, release of the worker whose
        hook did it)."""
        out: Counter[tuple[str, str]] = Counter()
        for call in self.ledger.calls("compensate"):
            run_id = call.step.split(":", 1)[0]
            out[(self.client_of.get(run_id, "?"), self.version_of.get(call.pid, "?"))] += 1
        return out

    def upgrade_lines(self, verdict_line: str) -> tuple[list[str], bool]:
        served = self.served()
        received: dict[str, Counter[str]] = {"previous": Counter(), "current": Counter()}
        unregistered = 0
        for worker in self.workers:
            received[worker.version].update(worker.received())
            if worker.release is not None:
                unregistered += worker.unregistered()
        both = sorted(set(received["previous"]) & set(received["current"]))
        every = sorted(set(received["previous"]) | set(received["current"]))
        up = self.upgrade
        lines = [
            f"workers: {self.release.tag} on worker-a (beat) and worker-b, then the current code's beside "
            "them on each (prefork 2); the previous ones stopped one by one, the beat rolled last",
            f"upgrade order: journal at {up.previous_head} ({self.release.tag}'s head); expand to {up.expanded_to} "
            f"in {up.expand_s:.2f} s with {up.in_flight_at_expand} unwinds in flight",
            *(f"  {e}" for e in up.events),
            "steps undone, client -> worker: "
            + ", ".join(f"{c} -> {w}: {n}" for (c, w), n in sorted(served.items())),
            "tasks received by previous-release workers: "
            + ", ".join(f"{k} {v}" for k, v in sorted(received["previous"].items())),
            "tasks received by current workers: "
            + ", ".join(f"{k} {v}" for k, v in sorted(received["current"].items())),
            f"unregistered tasks refused by previous-release workers: {unregistered}; "
            f"previous-release workers rolled forward after a crash: {up.rolled_forward}",
        ]
        for problem in up.problems:
            lines.append(f"problem: {problem}")
        got = dict(re.findall(r"(\w+)=(\S+)", verdict_line))
        crossed = served[("previous", "current")] > 0 and served[("current", "previous")] > 0
        if not crossed:
            lines.append(
                "problem: a direction was not served (previous client -> current worker, current -> previous)"
            )
        if both != every:
            lines.append(f"problem: task types served by one release only: {sorted(set(every) - set(both))}")
        clean = (
            all(got.get(k) == "0" for k in ("lost", "doubled", "after_tombstone", "mismatches"))
            and "unfinished" not in got
            and unregistered == 0
            and up.contract_checked
            and not up.problems
            and crossed
            and both == every
        )
        extra = "" if clean else " clean=no"
        lines.append(
            f"upgrade: from={self.release.tag} to=HEAD runs={got.get('runs')} faults={got.get('faults')} "
            f"lost={got.get('lost')} doubled={got.get('doubled')} after_tombstone={got.get('after_tombstone')} "
            f"mismatches={got.get('mismatches')}"
            + (f" unfinished={got['unfinished']}" if "unfinished" in got else "")
            + (f" unregistered={unregistered}" if unregistered else "")
            + extra
        )
        return lines, clean


def start_worker(
    fleet: Fleet, release: Release | None, host: str, *, beat: bool, count: int, breaks: str = ""
) -> ReleaseWorker:
    env = fleet.dep.env(
        FAULT_BREAK=breaks, **fleet.timing_env(), **(fleet.skew_env() if host == SKEWED else {})
    )
    name = "previous" if release is not None else "current"
    worker = ReleaseWorker(release, env, STATE / f"{name}-worker-{count}.log", host=host, beat=beat)
    wait_for(worker.ready, 90, f"the {name} worker on {host} to be ready", interval=0.1)
    return worker


Early = list[tuple[str, float, list[str]]]  # runs started before the drive: id, when, task ids


def warm_up(ledger: Ledger, client: PreviousClient, early: Early) -> None:
    """Runs from the previous client until each of its workers' pool children has undone a step (each
    then holds its journal open), at most 120 s."""

    def every_child_served() -> bool:
        pids = {c.pid for c in ledger.calls("compensate")}
        return all(len(pids & set(namespace_pids(HOSTS[h].ns))) >= 2 for h in ("worker-a", "worker-b"))

    deadline = time.monotonic() + 120
    n = 0
    while not every_child_served() and time.monotonic() < deadline:
        run_id = f"warm-{n}-{uuid.uuid4().hex[:6]}"
        early.append((run_id, time.monotonic(), client.request(f"{run_id} 0.3", run_id)))
        n += 1
        time.sleep(0.5)
    if not every_child_served():
        raise RuntimeError("the previous release's pool children did not all serve a step in 120 s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--previous", required=True, help="the previous release's root (tests/upgrade/previous.py)"
    )
    parser.add_argument("--tag", default=PREVIOUS_TAG)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--redis-after-roll", action="store_true", help="Redis is lost only after the roll")
    parser.add_argument(
        "--break",
        dest="breaks",
        default="",
        help="tests/faults/breaks.py names both releases know, comma-separated",
    )
    args = parser.parse_args()
    release = Release(args.tag, "", Path(args.previous))
    plan = Plan(runs=args.runs, repeats=args.repeats, seed=args.seed)
    fleet, net = Fleet(timing=dict(FLEET_TIMING)), Network()
    journal: Journal | None = None
    client: PreviousClient | None = None
    workers: list[ReleaseWorker] = []
    code = 1
    os.environ.update({f"SAGA_{k.upper()}": v for k, v in fleet.timing.items()})
    try:
        fleet.start()
        os.environ["FAULT_LEDGER_URL"] = fleet.ledger_pg.url
        ledger = Ledger(fleet.ledger_pg.url)
        ledger.setup()
        url = fleet.journal_pg.url
        up = Upgrade()
        # 1. The previous release's journal, workers and client.
        made = release.run(
            "-c", f"from saga_worker import open_journal; open_journal({url!r}, migrate=True).close()"
        )
        if made.returncode != 0:
            raise RuntimeError(f"the previous release could not migrate its journal:\n{made.stderr[-3000:]}")
        up.previous_head = revision_of(url) or "none"
        fleet.start_delayers()
        workers.append(start_worker(fleet, release, "worker-a", beat=True, count=0, breaks=args.breaks))
        workers.append(start_worker(fleet, release, SKEWED, beat=False, count=1, breaks=args.breaks))
        client = PreviousClient(release, fleet.dep.env(**fleet.timing_env()), STATE / "previous-client.log")
        early: Early = []
        warm_up(ledger, client, early)
        # 2. Expand, with the previous release's unwinds in flight.
        for n in range(6):
            run_id = f"expand-{n}-{uuid.uuid4().hex[:6]}"
            early.append((run_id, time.monotonic(), client.request(f"{run_id} 0.3", run_id)))
        up.expanded_to = expand_target()
        began = time.monotonic()
        upgrade_to(url, up.expanded_to)
        up.expand_s = time.monotonic() - began
        journal = open_journal(url, migrate=False)
        up.in_flight_at_expand = sum(
            1
            for run_id, _, _ in early
            if (run := journal.get_run(run_id)) is not None
            and run.unwind_state.value not in ("complete", "attention")
        )
        # 3. The current code's workers beside the previous release's.
        workers.append(start_worker(fleet, None, "worker-a", beat=False, count=2, breaks=args.breaks))
        workers.append(start_worker(fleet, None, SKEWED, beat=False, count=3, breaks=args.breaks))
        print(f"fleet up for the upgrade: journal {url}, {up.previous_head} -> {up.expanded_to}", flush=True)
        drive = RollingDrive(
            fleet,
            net,
            journal,
            ledger,
            plan,
            release,
            workers,
            client,
            up,
            redis_after_roll=args.redis_after_roll,
        )
        drive.breaks = args.breaks
        for run_id, at, task_ids in early:
            drive.all_runs.append(run_id)
            drive.client_of[run_id] = "previous"
            drive.pending[run_id] = at
            drive.task_ids[run_id] = task_ids
        drive.run()
        verdict, text = drive.report()
        if not verdict.clean:
            print(verdict.summary(), flush=True)
        for crash in drive.crashes[:3]:
            print("worker crash (restarted):\n" + crash, flush=True)
        lines, clean = drive.upgrade_lines(text.splitlines()[-1])
        print(text, flush=True)
        print("\n".join(lines), flush=True)
        code = 0 if clean else 3
    finally:
        with contextlib.suppress(Exception):
            net.heal_all()
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop()
        for worker in workers:
            with contextlib.suppress(Exception):
                worker.stop()
        if journal is not None:
            with contextlib.suppress(Exception):
                journal.close()
        fleet.close()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
