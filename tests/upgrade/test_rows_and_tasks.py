"""The compatibility rule (issue 51, docs/guides/upgrading.md): whatever a release writes stays
readable and runnable by the previous release, and the reverse, for one release. Rows of every kind
(runs, calls, claims, unwinds and their reports, a lease left by a process that died inside a hook)
written by one release are read and their unwinds finished by both; the two must read and report the
same. The tasks the previous release sends are accepted by the current code, and the current code's
workers with default settings send only tasks the previous release runs (tests/upgrade/
test_messages.py proves the last on real workers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from saga_worker import open_journal
from saga_worker.journal import migrate

from .previous import Release
from .tasks import tasks_of

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SIDES = HERE / "sides.py"
TTL = "1"


def side(release: Release | None, command: str, url: str, prefix: str, ledger: Path) -> str:
    """``sides.py COMMAND`` run by ``release`` (None: the current code), outside this checkout's tree
    for the previous release. A crash is expected to end in the hook (exit 3)."""
    env = {"SIDES_LEDGER": str(ledger), "SAGA_CLAIM_TTL": TTL, "SIDES_OPENED_BEFORE_EXPAND": "1"}
    if release is None:
        proc = subprocess.run(
            [sys.executable, str(SIDES), command, url, prefix],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    else:
        proc = release.run(str(SIDES), command, url, prefix, env=env)
    expected = 3 if command == "crash" else 0
    assert proc.returncode == expected, f"{command} by {release or 'current'}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("writer", ["previous", "current"])
def test_rows_one_release_writes_the_other_reads_and_unwinds_alike(
    previous: Release, bare_url: str, writer: str, tmp_path: Path
) -> None:
    """The journal as a rolling upgrade has it: migrated (expand) to the current code's head while
    workers of both releases serve it."""
    open_journal(bare_url, migrate=True).close()
    ledger = tmp_path / "provider.txt"
    by = previous if writer == "previous" else None
    for prefix in ("to-previous", "to-current"):
        side(by, "write", bare_url, prefix, ledger)
        side(by, "crash", bare_url, prefix, ledger)
    read_by_previous = json.loads(side(previous, "read", bare_url, "to-previous", ledger))
    read_by_current = json.loads(side(None, "read", bare_url, "to-current", ledger))
    assert read_by_previous == read_by_current
    # Every unwind ended with every step undone: the refused step retried, the crashed one taken over.
    for name, entries in read_by_current["reports"].items():
        assert [e[1] for e in entries[1:]] in (
            ["compensated", "compensated"],
            ["already-compensated", "already-compensated"],
        ), (name, entries)
    assert read_by_current["before"]["crashed"]["claims"][1][1] == "claimed"  # a lease was left held
    assert read_by_current["after"]["crashed"]["claims"][1][1] == "compensated"
    applied = Counter(
        line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("applied")
    )
    assert set(applied.values()) == {1}, applied  # no compensation applied twice, whoever finished it
    assert len(applied) == 2 * 3 * 2  # two twins, three unwinds each, two steps with a hook each


def test_the_previous_release_refuses_to_open_a_journal_expanded_past_it(
    previous: Release, bare_url: str
) -> None:
    """What the upgrade page's order rests on: a 0.1.0 process that opens its journal after the
    expand migration refuses to start (fail closed, nothing written), while one that opened it before
    goes on (the test above). From this release on, a worker opens a journal a later release expanded
    (tests/journal/test_journal_open.py)."""
    open_journal(bare_url, migrate=True).close()
    proc = previous.run(
        "-c", f"from saga_worker import open_journal; open_journal({bare_url!r}, migrate=False)"
    )
    assert proc.returncode != 0
    assert "JournalError" in proc.stderr and migrate.head_revision() in proc.stderr, proc.stderr[-2000:]


def test_every_task_the_previous_release_sends_is_registered_here_and_takes_its_arguments(
    previous: Release,
) -> None:
    old, new = tasks_of(previous), tasks_of(None)
    for name, params in old["tasks"].items():
        assert name in new["tasks"], f"{name}: sent by {previous.tag}, no longer registered"
        now = {p[0]: p for p in new["tasks"][name]}
        for position, (pname, kind, _default) in enumerate(params):
            assert pname in now and now[pname][1] == kind, f"{name}({pname}) changed: {new['tasks'][name]}"
            assert new["tasks"][name][position][0] == pname, f"{name}: {pname} moved (positional callers)"
        added = [p for p in new["tasks"][name] if p[0] not in {q[0] for q in params}]
        assert all(p[2] for p in added), f"{name}: a new parameter without a default: {added}"


def test_with_default_settings_beat_sends_only_tasks_the_previous_release_runs(previous: Release) -> None:
    old, new = tasks_of(previous), tasks_of(None)
    assert set(new["beat"]) <= set(old["tasks"]), new["beat"]
