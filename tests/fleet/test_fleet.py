"""The fleet under faults (issue 46): ``make fleet`` (short tier, in CI) and ``make fleet-long``.

Runs ``python -m tests.fleet`` (which cleans, builds the namespaces, drives and cleans again), echoes
its output, keeps its table in ``SAGA_FLEET_TABLE`` and asserts what the ``fleet:`` line says: nothing
lost, nothing doubled, nothing executed after a tombstone, every report true, every unwind finished,
every fault kind landed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .faults import KINDS
from .needs import parse, run_harness

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

RUNS = int(os.environ.get("SAGA_FLEET_RUNS", "200"))
REPEATS = int(os.environ.get("SAGA_FLEET_REPEATS", "5"))


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m tests.fleet ARGS``, or a skip (a failure under CI) when the machine lacks a part."""
    return run_harness("tests.fleet", *args, timeout=4 * 3600)


@pytest.mark.timeout(600)
def test_the_fleet_reports_the_damage_of_a_build_without_stable_keys() -> None:
    """The fleet's checker bites: workers that undo each step under a fresh key are counted doubled."""
    proc = fleet("--runs", "10", "--repeats", "0", "--break", "unstable-key")
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines and lines[-1].startswith("fleet: "), (
        proc.stdout[-4000:] + proc.stderr[-4000:]
    )
    got = parse(lines[-1])
    assert int(got["doubled"]) > 0 and int(got["mismatches"]) > 0, lines[-1]


@pytest.mark.timeout(4 * 3600)
def test_a_fleet_under_faults_loses_nothing_doubles_nothing_and_reports_true(tmp_path: Path) -> None:
    proc = fleet("--runs", str(RUNS), "--repeats", str(REPEATS))
    print(proc.stdout[-20000:])
    table = Path(os.environ.get("SAGA_FLEET_TABLE", str(tmp_path / "fleet.txt")))
    lines = proc.stdout.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("settings:")), len(lines))
    table.write_text("\n".join(lines[start:]) + "\n")
    assert proc.returncode == 0, proc.stderr[-4000:]
    last = lines[-1] if lines else ""
    assert last.startswith("fleet: "), proc.stdout[-4000:] + proc.stderr[-4000:]
    got = parse(last)
    assert (got["lost"], got["doubled"], got["after_tombstone"], got["mismatches"]) == ("0", "0", "0", "0"), (
        last
    )
    assert "unfinished" not in got, last
    assert int(got["kinds"]) == len(KINDS) + 1, last  # every fault kind landed, the skew too
    assert int(got["runs"]) >= RUNS, last
