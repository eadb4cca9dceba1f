"""A separate OS process that drives (or reads) a durable run of the sample order.

    python -m tests.procs.run_child --journal URL --scope S --run RUN_ID [--mode run|crash|show]
        [--crash-at reserve] [--crash-when before|after] [--pause 0.05] [--start-file PATH]
        [--flavour plain|recover|idempotent]

Prints one JSON line. Modes:
- ``run``: ``run_durable`` of charge, reserve, notify; prints ``{"pid", "status"}`` where status is the
  run's (``finished``/``failed``) or ``blocked`` if ``SideEffectRetryBlockedError`` was raised (a rival
  process held a call). Every execute pauses ``--pause`` seconds, to overlap with rivals.
- ``crash``: as ``run``, but inside the execute of ``--crash-at`` the process dies with ``os._exit(17)``,
  ``before`` or ``after`` the tool's effect reached the ledger (the provider).
- ``show``: prints ``{"pid", "run", "decisions", "records"}`` as this process reads the journal.
``--flavour`` gives every tool a ``recover`` hook (asking the ledger) or ``idempotent=True``.
With ``--start-file``, the process waits for that file to exist (before it opens the journal), so
several processes start together. ``--migrate`` opens the journal with ``migrate=True``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from saga_worker import (
    CallOptions,
    Journal,
    RecoverResult,
    SideEffectRetryBlockedError,
    Tool,
    open_journal,
    run_durable,
    scripted,
)
from tests.ledger import Ledger, open_ledger, order_script

EXIT_CODE = 17
ROOT = Path(__file__).resolve().parents[2]
NAMES = ("charge", "reserve", "notify")


def run_tools(
    ledger: Ledger,
    *,
    pause: float = 0.0,
    crash_at: str | None = None,
    crash_when: str = "before",
    recover: bool = False,
    idempotent: bool = False,
) -> dict[str, Tool]:
    """The order's tools: execute applies its effect once per key in ``ledger`` (as a provider would)."""

    def make(name: str) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            if pause:
                time.sleep(pause)
            if name == crash_at and crash_when == "before":
                ledger.call(opts.idempotency_key, f"entered:{name}")
                os._exit(EXIT_CODE)
            ledger.effect(opts.idempotency_key, f"execute:{name}")
            if name == crash_at:
                os._exit(EXIT_CODE)
            return {"id": f"{name}-{opts.tool_call_id}"}

        def probe(input: Any, opts: CallOptions) -> RecoverResult:
            ledger.call(opts.idempotency_key, f"recover:{name}")
            done = any(e.key == opts.idempotency_key for e in ledger.effects())
            return RecoverResult(done=done, output={"id": f"{name}-{opts.tool_call_id}", "recovered": True})

        return Tool(execute, recover=probe if recover else None, idempotent=idempotent)

    return {name: make(name) for name in NAMES}


def spawn(
    journal_url: str,
    scope: str,
    run_id: str,
    *,
    mode: str = "run",
    crash_at: str = "reserve",
    crash_when: str = "before",
    pause: float = 0.0,
    start_file: Path | None = None,
    flavour: str = "plain",
    migrate: bool = False,
) -> subprocess.Popen[str]:
    """Start this module as a child process (from the test's side)."""
    argv = [
        sys.executable,
        "-m",
        "tests.procs.run_child",
        "--journal",
        journal_url,
        "--scope",
        scope,
        "--run",
        run_id,
        "--mode",
        mode,
        "--crash-at",
        crash_at,
        "--crash-when",
        crash_when,
        "--pause",
        str(pause),
        "--flavour",
        flavour,
    ] + (["--migrate"] if migrate else [])
    if start_file is not None:
        argv += ["--start-file", str(start_file)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_FAULTS")}
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], *, expect: int = 0, timeout: float = 90.0) -> dict[str, Any]:
    """Wait for a child started by ``spawn``; return its printed JSON (empty for a child that died)."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != expect:
        raise AssertionError(f"run child exited {proc.returncode}, expected {expect}:\n{err}")
    lines = out.strip().splitlines()
    return dict(json.loads(lines[-1])) if lines else {}


def show(journal: Journal, run_id: str) -> dict[str, Any]:
    run = journal.get_run(run_id)
    return {
        "pid": os.getpid(),
        "run": None if run is None else {"status": run.status.value, "prompt": run.prompt, "text": run.text},
        "decisions": journal.list_decisions(run_id),
        "records": [
            {"suffix": r.suffix, "status": r.status.value, "seq": r.seq, "output": r.output}
            for r in journal.list_records(run_id)
        ],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journal", required=True)
    parser.add_argument("--scope", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--mode", choices=["run", "crash", "show"], default="run")
    parser.add_argument("--crash-at", default="reserve")
    parser.add_argument("--crash-when", choices=["before", "after"], default="before")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--start-file", default=None)
    parser.add_argument("--flavour", choices=["plain", "recover", "idempotent"], default="plain")
    parser.add_argument("--migrate", action="store_true")
    args = parser.parse_args(argv)

    if args.start_file:
        start = Path(args.start_file)
        deadline = time.monotonic() + 60
        while not start.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    journal = open_journal(args.journal, migrate=True if args.migrate else None)
    if args.mode == "show":
        print(json.dumps(show(journal, args.run)), flush=True)
        journal.close()
        return 0
    ledger = open_ledger(args.journal, args.scope)
    tools = run_tools(
        ledger,
        pause=args.pause,
        crash_at=args.crash_at if args.mode == "crash" else None,
        crash_when=args.crash_when,
        recover=args.flavour == "recover",
        idempotent=args.flavour == "idempotent",
    )
    status: str  # the run's status, or "blocked"
    try:
        status = run_durable(
            args.run,
            journal=journal,
            tools=tools,
            planner=scripted(*order_script(), final="ok"),
            prompt="sample order",
        ).status
    except SideEffectRetryBlockedError:
        status = "blocked"
    print(json.dumps({"pid": os.getpid(), "status": status}), flush=True)
    ledger.close()
    journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
