"""`saga-worker approve / deny / approve-compensation / deny-compensation / audit` and
`compensate --reason` (docs/reference/approvals.md), on the embedded SQLite journal, in this process (--local)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from saga_worker import open_journal, read_audit, resume_run, run_durable
from saga_worker.cli import main
from saga_worker.journal import Journal
from saga_worker.journal.records import RecordStatus
from saga_worker.settings import get_settings
from tests.cli.approval_tools import LEDGER, TOOLS, gated_order, refund_order


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("SAGA_JOURNAL_URL", "SAGA_BROKER_URL", "SAGA_RESULT_BACKEND", "SAGA_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGA_HOME", str(tmp_path / ".saga"))
    monkeypatch.setenv("SAGA_TOOLS", "tests.cli.approval_tools:TOOLS")
    monkeypatch.setenv("SAGA_ACTOR", "dana")
    get_settings.cache_clear()
    yield tmp_path / ".saga"
    get_settings.cache_clear()


def cli_journal() -> Journal:
    return open_journal(get_settings().resolved_journal_url())


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    return result.exit_code, result.output


def suspended(run_id: str) -> None:
    with cli_journal() as j:
        assert run_durable(run_id, journal=j, tools=TOOLS, planner=refund_order()).status == "suspended"


def placed(run_id: str) -> None:
    with cli_journal() as j:
        assert run_durable(run_id, journal=j, tools=TOOLS, planner=gated_order()).status == "finished"


def test_approve_lets_the_next_resume_execute_the_call_once_and_the_trail_names_the_shell_actor(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suspended("refund-1")
    code, output = invoke("approve", "refund-1", "call-2", "--reason", "customer asked")
    assert code == 0, output
    assert "approved" in output and "dana" in output
    # Approving again, as someone else, is a no-op, not an error: it names who approved.
    monkeypatch.setenv("SAGA_ACTOR", "erin")
    get_settings.cache_clear()
    code, output = invoke("approve", "refund-1", "call-2", "--json")
    assert code == 0 and json.loads(output)["by"] == "dana", output
    with cli_journal() as j:
        assert resume_run("refund-1", journal=j, tools=TOOLS, planner=refund_order()).status == "finished"
        assert LEDGER.effect_counts("execute:refund")["refund-1:call-2"] == 1
    code, output = invoke("audit", "refund-1", "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert [(r["action"], r["actor"], r["via"], r["target"], r["reason"]) for r in rows] == [
        ("approved", "dana", "cli", "call-2", "customer asked")
    ]


def test_deny_records_the_call_denied_and_approving_it_afterwards_fails_with_one_line(home: Path) -> None:
    suspended("refund-2")
    code, output = invoke("deny", "refund-2", "call-2", "--reason", "fraud", "--json")
    assert code == 0, output
    assert json.loads(output)["state"] == "denied"
    result = CliRunner().invoke(main, ["approve", "refund-2", "call-2"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "error:" in result.output and "denied" in result.output
    with cli_journal() as j:
        record = j.get_record("refund-2", "call-2")
        assert record is not None and record.status is RecordStatus.DENIED


def test_a_condemned_run_refuses_approve_with_exit_1_and_writes_nothing(home: Path) -> None:
    suspended("refund-3")
    assert invoke("compensate", "refund-3", "--local", "--reason", "order cancelled")[0] == 0
    result = CliRunner().invoke(main, ["approve", "refund-3", "call-2"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "is condemned" in result.output
    with cli_journal() as j:
        assert [r.action.value for r in read_audit(j, "refund-3")] == ["condemned", "unwound"]
        record = j.get_record("refund-3", "call-2")
        assert record is not None and record.status is RecordStatus.SUSPENDED


def test_unknown_call_and_unknown_run_get_exit_1(home: Path) -> None:
    suspended("refund-4")
    for args in (("approve", "refund-4", "call-9"), ("deny", "nope", "call-1"), ("audit", "nope")):
        result = CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})
        assert result.exit_code == 1 and "error:" in result.output, args


def test_a_gated_compensation_halts_with_exit_3_then_approve_compensation_lets_it_finish(home: Path) -> None:
    placed("order-1")
    code, output = invoke("compensate", "order-1", "--local", "--dry-run")
    assert code == 0 and "(needs approval)" in output, output
    code, output = invoke("compensate", "order-1", "--local", "--reason", "out of stock", "--json")
    assert code == 3, output
    first = json.loads(output)
    assert [(e["suffix"], e["status"]) for e in first["entries"]] == [
        ("call-2", "awaiting-approval"),
        ("call-1", "not-attempted"),
    ]
    assert first["condemned_by"] == "dana" and first["reason"] == "out of stock"

    code, output = invoke("approve-compensation", "order-1", "call-2", "--reason", "checked")
    assert code == 0 and "approved" in output, output
    code, output = invoke("compensate", "order-1", "--local", "--json")
    assert code == 0, output
    assert [e["status"] for e in json.loads(output)["entries"]] == ["compensated", "compensated"]
    assert LEDGER.effect_counts("compensate:reserve")["order-1:comp:call-2"] == 1

    code, output = invoke("audit", "order-1")
    assert code == 0, output
    assert "out of stock" in output and "compensation-approved" in output and "awaiting-approval: 1" in output
    code, output = invoke("audit", "order-1", "--json")
    actions = [(r["action"], r["via"]) for r in json.loads(output)]
    # The dry run is not in the trail.
    assert actions == [
        ("condemned", "cli"),
        ("unwound", "cli"),
        ("compensation-approved", "cli"),
        ("unwound", "cli"),
    ]


def test_deny_compensation_makes_the_step_read_skipped_denied_and_the_unwind_goes_on(home: Path) -> None:
    placed("order-2")
    assert invoke("compensate", "order-2", "--local")[0] == 3
    code, output = invoke("deny-compensation", "order-2", "call-2", "--reason", "keep the stock")
    assert code == 0 and "denied" in output, output
    code, output = invoke("compensate", "order-2", "--local")
    assert code == 0 and "skipped-denied" in output, output
    assert "(needs approval)" not in output  # said of a plan only, not of a decided step
    assert LEDGER.effect_counts("compensate:reserve")["order-2:comp:call-2"] == 0
    # Deciding the other way afterwards is refused.
    result = CliRunner().invoke(main, ["approve-compensation", "order-2", "call-2"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "denied" in result.output


def test_a_run_waiting_for_an_approval_reads_suspended_in_runs_and_report_not_running(home: Path) -> None:
    suspended("refund-9")
    code, output = invoke("runs", "--json")
    assert code == 0 and [(r["run_id"], r["status"], r["journal_status"]) for r in json.loads(output)] == [
        ("refund-9", "suspended", "running")
    ]
    code, output = invoke("runs")
    assert code == 0 and "refund-9\tsuspended\t" in output
    code, output = invoke("report", "refund-9")
    assert code == 0 and "refund-9: suspended," in output
    code, output = invoke("report", "refund-9", "--json")
    assert json.loads(output)["run"]["status"] == "suspended"
