"""A separate OS process that unwinds a run of the sample order (tests/ledger.py ``order_tools``).

    python -m tests.procs.unwind_child --journal URL --scope S --run RUN_ID [--mode unwind|exit|hang]
        [--step reserve] [--ttl 3] [--pause 0.2] [--start-file PATH] [--timeout 0.5]

Prints one JSON line: ``{"pid": ..., "report": <CompensationReport as JSON>}``. Modes:
- ``unwind``: compensate; every compensate hook first pauses ``--pause`` seconds (to overlap with a rival).
- ``exit``: the hook of ``--step`` notes that it was entered, then the process dies with ``os._exit(17)``.
- ``hang``: the hook of ``--step`` notes that it was entered, then sleeps until the test SIGKILLs it
  (or, with ``--release-file``, until that file exists: the hook then goes on and returns).
With ``--start-file``, the unwind waits for that file to exist, so several processes start together.
With ``--timeout``, every tool has that ``compensate_timeout``: in ``hang`` mode the unwind then
returns (the hook times out), prints its report and the process exits with the hook still hanging.
With ``--skew``, this process's wall clock (``time.time``) reads that many seconds off: a clock that
stepped.
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

from saga_worker import CallOptions, compensate_run, open_journal
from tests.ledger import open_ledger, order_tools

EXIT_CODE = 17
ROOT = Path(__file__).resolve().parents[2]


def spawn(
    journal_url: str,
    scope: str,
    run_id: str,
    *,
    mode: str = "unwind",
    step: str = "reserve",
    ttl: float | None = None,
    pause: float = 0.0,
    start_file: Path | None = None,
    timeout: float | None = None,
    skew: float = 0.0,
    release_file: Path | None = None,
) -> subprocess.Popen[str]:
    """Start this module as a child process (from the test's side)."""
    argv = [
        sys.executable,
        "-m",
        "tests.procs.unwind_child",
        "--journal",
        journal_url,
        "--scope",
        scope,
        "--run",
        run_id,
        "--mode",
        mode,
        "--step",
        step,
        "--pause",
        str(pause),
    ]
    if ttl is not None:
        argv += ["--ttl", str(ttl)]
    if start_file is not None:
        argv += ["--start-file", str(start_file)]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if skew:
        argv += ["--skew", str(skew)]
    if release_file is not None:
        argv += ["--release-file", str(release_file)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_FAULTS")}
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def kill_if_alive(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a child started by ``spawn`` unless it has exited (a test's cleanup)."""
    if proc.poll() is None:
        proc.kill()


def result_of(proc: subprocess.Popen[str], timeout: float = 90.0) -> dict[str, Any]:
    """Wait for a child started by ``spawn`` and return its printed ``{"pid", "report"}``."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"unwind child exited {proc.returncode}:\n{err}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journal", required=True)
    parser.add_argument("--scope", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--mode", choices=["unwind", "exit", "hang"], default="unwind")
    parser.add_argument("--step", default="reserve")
    parser.add_argument("--ttl", type=float, default=None)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--start-file", default=None)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--skew", type=float, default=0.0)
    parser.add_argument("--release-file", default=None)
    args = parser.parse_args(argv)
    if args.skew:
        real = time.time
        time.time = lambda: real() + args.skew

    journal = open_journal(args.journal)
    ledger = open_ledger(args.journal, args.scope)

    def before_compensate(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        if args.pause:
            time.sleep(args.pause)
        if args.mode != "unwind" and name == args.step:
            ledger.call(opts.idempotency_key, f"entered:{name}")
            if args.mode == "exit":
                os._exit(EXIT_CODE)
            release = None if args.release_file is None else Path(args.release_file)
            while release is None or not release.exists():  # hang: the test kills or releases us
                time.sleep(0.05 if release is not None else 1.0)

    if args.start_file:
        start = Path(args.start_file)
        deadline = time.monotonic() + 60
        while not start.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    report = compensate_run(
        args.run,
        journal=journal,
        tools=order_tools(ledger, before_compensate=before_compensate, compensate_timeout=args.timeout),
        claim_ttl=args.ttl,
    )
    print(json.dumps({"pid": os.getpid(), "report": report.model_dump(mode="json")}), flush=True)
    ledger.close()
    journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
