"""The rolling upgrade under faults (issue 51): ``make fleet-upgrade`` (short, in CI) and
``make fleet-upgrade-long``. Runs ``python -m tests.fleet.upgrade`` (the previous release built from
its tag, then tests/fleet/rolling.py in the fleet), echoes its output, keeps its table in
``SAGA_UPGRADE_TABLE`` and asserts the ``upgrade:`` line: nothing lost, doubled or run after a
tombstone, every report true, every unwind finished; the run's own checks (both directions served,
every task type served by both releases, no task refused as unregistered, the contract step reached
with no process of the previous release left) make it exit non-zero otherwise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .needs import parse, run_harness

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

RUNS = int(os.environ.get("SAGA_UPGRADE_RUNS", "40"))
REPEATS = int(os.environ.get("SAGA_UPGRADE_REPEATS", "1"))


def upgrade(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m tests.fleet.upgrade ARGS``, or a skip (a failure under CI) when the machine lacks a part."""
    return run_harness("tests.fleet.upgrade", *args, timeout=3 * 3600)


@pytest.mark.timeout(900)
def test_the_upgrade_reports_the_damage_of_builds_without_stable_keys() -> None:
    """The upgrade's checker bites: workers of both releases that undo each step under a fresh key are
    counted doubled, and the run exits non-zero."""
    proc = upgrade("--runs", "12", "--repeats", "0", "--break", "unstable-key")
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("upgrade: "), proc.stdout[-4000:] + proc.stderr[-4000:]
    got = parse(lines[-1])
    assert int(got["doubled"]) > 0 and int(got["mismatches"]) > 0, lines[-1]
    assert proc.returncode != 0, lines[-1]


@pytest.mark.timeout(3 * 3600)
def test_a_rolling_upgrade_under_faults_loses_nothing_doubles_nothing_and_reports_true(
    tmp_path: Path,
) -> None:
    late = ["--redis-after-roll"] if os.environ.get("SAGA_UPGRADE_REDIS_AFTER_ROLL") == "1" else []
    proc = upgrade("--runs", str(RUNS), "--repeats", str(REPEATS), *late)
    print(proc.stdout[-20000:])
    lines = proc.stdout.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("settings:")), len(lines))
    table = Path(os.environ.get("SAGA_UPGRADE_TABLE", str(tmp_path / "upgrade.txt")))
    table.write_text("\n".join(lines[start:]) + "\n")
    last = lines[-1] if lines else ""
    assert last.startswith("upgrade: "), proc.stdout[-4000:] + proc.stderr[-4000:]
    got = parse(last)
    assert (got["lost"], got["doubled"], got["after_tombstone"], got["mismatches"]) == ("0", "0", "0", "0"), (
        last
    )
    assert proc.returncode == 0, "\n".join(lines[start:]) + proc.stderr[-4000:]
    assert int(got["runs"]) >= RUNS, last
