"""The `saga-worker` commands that need no worker: runs, report, compensate --local, db upgrade, and
one-line errors. (The demo and `compensate` through a worker run in tests/integration.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from saga_worker import open_journal, run_durable, saga
from saga_worker.cli import main
from saga_worker.contrib.demo import TOOLS, order_planner
from saga_worker.journal.records import UnwindState
from saga_worker.settings import get_settings
from tests.reads import run_of


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in (
        "SAGA_JOURNAL_URL",
        "SAGA_BROKER_URL",
        "SAGA_RESULT_BACKEND",
        "SAGA_REDIS_URL",
        "SAGA_TOOLS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGA_HOME", str(tmp_path / ".saga"))
    get_settings.cache_clear()
    yield tmp_path / ".saga"
    get_settings.cache_clear()


@pytest.fixture
def demo_tools(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sample tools, named as any deployment names its own (there is no default)."""
    monkeypatch.setenv("SAGA_TOOLS", "saga_worker.demo:TOOLS")
    get_settings.cache_clear()
    return home


def place(run_id: str) -> None:
    with open_journal(get_settings().resolved_journal_url()) as journal:
        run_durable(run_id, journal=journal, tools=TOOLS, planner=order_planner())


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_compensate_local_unwinds_in_process_and_prints_the_report_as_json(demo_tools: Path) -> None:
    place("order-1")
    code, output = invoke("compensate", "order-1", "--local", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert [e["status"] for e in report["entries"]] == ["skipped-no-hook", "compensated", "compensated"]
    assert report["condemned"] is True


def test_compensate_local_dry_run_prints_a_plan_and_condemns_nothing(demo_tools: Path) -> None:
    place("order-2")
    code, output = invoke("compensate", "order-2", "--local", "--dry-run")
    assert code == 0, output
    assert "would-compensate" in output and "plan (dry run)" in output
    with open_journal(get_settings().resolved_journal_url()) as journal:
        assert not run_of(journal, "order-2").condemned


def test_report_shows_each_step_with_its_compensation_state_from_the_journal(demo_tools: Path) -> None:
    place("order-3")
    invoke("compensate", "order-3", "--local")
    code, output = invoke("report", "order-3", "--json")
    assert code == 0, output
    data = json.loads(output)
    assert data["run"]["condemned"] is True and data["run"]["unwind_state"] == "complete"
    assert [(s["tool_name"], (s["compensation"] or {}).get("status")) for s in data["steps"]] == [
        ("charge", "compensated"),
        ("reserve_stock", "compensated"),
        ("send_email", None),
    ]
    code, table = invoke("report", "order-3")
    assert code == 0 and "reserve_stock" in table and "compensated" in table


def test_runs_lists_status_tombstone_and_a_run_flagged_for_a_person(home: Path) -> None:
    place("order-4")
    place("order-5")
    with open_journal(get_settings().resolved_journal_url()) as journal:
        journal.condemn("order-5")
        journal.set_unwind_state("order-5", UnwindState.ATTENTION, note="gave up after 8 re-drives")
    code, output = invoke("runs", "--json")
    assert code == 0, output
    runs = {r["run_id"]: r for r in json.loads(output)}
    assert runs["order-4"]["status"] == "finished" and runs["order-4"]["condemned"] is False
    assert runs["order-5"]["unwind_state"] == "attention" and runs["order-5"]["condemned"] is True
    code, table = invoke("runs")
    assert code == 0 and "attention" in table and "gave up after 8 re-drives" in table


def test_report_of_a_run_the_journal_never_saw_prints_one_line_and_exits_non_zero(home: Path) -> None:
    place("order-1")
    result = CliRunner().invoke(main, ["report", "no-such-run"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: run 'no-such-run' is not in the journal"]


def test_a_bad_journal_url_prints_one_clear_line_and_exits_non_zero(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGA_JOURNAL_URL", "mysql://nowhere/db")
    get_settings.cache_clear()
    result = CliRunner().invoke(main, ["runs"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "mysql" in lines[0]


def test_compensate_local_with_a_bad_tools_setting_names_it_and_exits_non_zero(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGA_TOOLS", "no_such_module:TOOLS")
    get_settings.cache_clear()
    place("order-6")
    result = CliRunner().invoke(main, ["compensate", "order-6", "--local"])
    assert result.exit_code == 1
    assert "SAGA_TOOLS" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("dry_run", [False, True], ids=["unwind", "dry-run"])
def test_compensate_local_without_tools_refuses_in_one_line_and_condemns_nothing(
    home: Path, dry_run: bool
) -> None:
    place("order-7")  # a real order of the sample tools: a worker with no tools must not undo it with them
    result = CliRunner().invoke(
        main, ["compensate", "order-7", "--local", *(["--dry-run"] if dry_run else [])]
    )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: saga-worker compensate --local")
    assert "no tools configured: set SAGA_TOOLS=" in lines[0] and "never falls back" in lines[0]
    with open_journal(get_settings().resolved_journal_url()) as journal:
        run = journal.get_run("order-7")
        assert run is not None and not run.condemned
        assert journal.list_unwind_entries("order-7") == {}


def test_worker_without_tools_refuses_to_start_in_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:  # a worker that did start would replace pytest
        started.append(argv)
        raise SystemExit(99)

    monkeypatch.setattr("os.execv", execv)
    result = CliRunner().invoke(main, ["worker", "--concurrency", "1"])
    assert started == [] and result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("error: saga-worker worker: no tools configured")


def test_db_upgrade_migrates_the_journal_to_the_newest_revision(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saga_worker.journal import migrate

    url = f"sqlite:///{home.parent / 'fresh.db'}"
    monkeypatch.setenv("SAGA_JOURNAL_URL", url)
    get_settings.cache_clear()
    code, output = invoke("db", "upgrade")
    assert code == 0, output
    assert migrate.head_revision() in output
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def test_compensate_refuses_a_malformed_run_id_before_enqueueing_anything(home: Path) -> None:
    result = CliRunner().invoke(main, ["compensate", "bad id:with:colons"])
    assert result.exit_code == 1
    assert result.output.startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert not (home / "broker.db").exists()


def test_token_prints_a_token_once_and_an_entry_that_holds_only_its_digest(home: Path) -> None:
    from saga_worker.console.auth import Tokens

    code, output = invoke("token", "carol", "--role", "operator")
    assert code == 0, output
    token = output.split("it is not stored anywhere): ", 1)[1].split()[0]
    entry = output.split("SAGA_CONSOLE_TOKENS entry: ", 1)[1].strip()
    assert token not in entry and entry.startswith("carol:operator:sha256:")
    who = Tokens(entry).who(token)
    assert who is not None and who.name == "carol" and who.can_act


def test_serve_without_tokens_refuses_to_start_with_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SAGA_CONSOLE_TOKENS", raising=False)
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 1
    assert "SAGA_CONSOLE_TOKENS is not set" in result.output


def test_runs_filters_by_unwind_state_and_prefix_and_pages_with_a_cursor(home: Path) -> None:
    for n in range(3):
        place(f"order-{n}")
    place("other-1")
    with open_journal(get_settings().resolved_journal_url()) as journal:
        journal.condemn("order-1")
        journal.set_unwind_state("order-1", UnwindState.ATTENTION, note="gave up")
    code, output = invoke("runs", "--unwind", "attention", "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(output)] == ["order-1"]
    code, output = invoke("runs", "--search", "order-", "--limit", "2")
    assert code == 0 and "more: saga-worker runs --cursor " in output
    cursor = output.split("--cursor ", 1)[1].split()[0]
    code, output = invoke("runs", "--search", "order-", "--limit", "2", "--cursor", cursor, "--json")
    assert code == 0 and len(json.loads(output)) == 1
    result = CliRunner().invoke(main, ["runs", "--unwind", "sideways"])
    assert result.exit_code == 1 and "unwind 'sideways' is not one of" in result.output


def test_redrive_refuses_a_run_not_flagged_and_hands_a_flagged_one_back_to_the_workers(home: Path) -> None:
    place("order-5")
    result = CliRunner().invoke(main, ["redrive", "order-5"])
    assert result.exit_code == 1 and "not flagged for attention" in result.output
    with open_journal(get_settings().resolved_journal_url()) as journal:
        journal.condemn("order-5")
        journal.set_unwind_state("order-5", UnwindState.ATTENTION, note="gave up")
    code, output = invoke("redrive", "order-5", "--json")
    assert code == 0, output
    assert json.loads(output)["task_id"]
    with open_journal(get_settings().resolved_journal_url()) as journal:
        run = journal.get_run("order-5")
    assert (
        run is not None
        and run.unwind_state is UnwindState.PENDING
        and run.unwind_note is not None
        and run.unwind_note.startswith("re-driven by cli:")
    )


def test_a_record_with_an_unknown_status_makes_compensate_and_report_fail_closed_in_one_line(
    demo_tools: Path,
) -> None:
    import sqlalchemy as sa

    from saga_worker.journal.schema import records

    place("order-9")
    engine = sa.create_engine(get_settings().resolved_journal_url())
    with engine.begin() as conn:
        where = sa.and_(records.c.run_id == "order-9", records.c.suffix == "reserve")
        assert conn.execute(sa.update(records).where(where).values(status="Succeeded")).rowcount == 1
    engine.dispose()
    for args in (
        ["compensate", "order-9", "--local"],
        ["report", "order-9"],
        ["compensate", "order-9", "--local"],
    ):
        result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), lines
        assert "'order-9'" in lines[0] and "'reserve'" in lines[0] and "'Succeeded'" in lines[0]
    with open_journal(get_settings().resolved_journal_url()) as journal:
        run = journal.get_run("order-9")
        assert run is not None and run.condemned and run.unwind_state is not UnwindState.COMPLETE


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["runs", "--json"],
        ["report", "order-1"],
        ["audit", "order-1"],
        ["compensate", "order-1", "--local"],
    ],
)
def test_a_read_command_on_a_mistyped_sqlite_path_says_there_is_no_journal_and_creates_none(
    demo_tools: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    place("order-1")  # the real journal, in SAGA_HOME
    typo = demo_tools.parent / "jornal.db"
    monkeypatch.setenv("SAGA_JOURNAL_URL", f"sqlite:///{typo}")
    get_settings.cache_clear()
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: no journal at sqlite:///{typo}") and "SAGA_JOURNAL_URL" in line
    assert not typo.exists()


def test_a_read_command_on_an_empty_sqlite_file_says_it_holds_no_journal_and_adds_no_tables(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = home.parent / "empty.db"
    empty.touch()
    monkeypatch.setenv("SAGA_JOURNAL_URL", f"sqlite:///{empty}")
    get_settings.cache_clear()
    result = CliRunner().invoke(main, ["runs"])
    assert result.exit_code == 1 and "holds no saga-worker journal" in result.output, result.output
    import sqlite3

    with sqlite3.connect(empty) as db:
        assert db.execute("select name from sqlite_master").fetchall() == []


@pytest.mark.parametrize(
    "command",
    [["compensate", "order-44"], ["compensate", "order-44", "--local"], ["demo", "--run-id", "order-44"]],
    ids=["compensate", "compensate-local", "demo"],
)
def test_every_unwind_request_of_the_cli_refuses_a_bad_actor_the_same_way_before_anything_is_sent(
    demo_tools: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Each goes through actions (issue 44), which checks the request before anything is enqueued,
    opened or written: the same one line, no worker started, the run not condemned."""
    if command[0] == "compensate":
        place("order-44")
    monkeypatch.setenv("SAGA_ACTOR", "ops\nforged line")
    get_settings.cache_clear()
    result = CliRunner().invoke(main, command, env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: SAGA_ACTOR: actor 'ops\\nforged line' holds the control character"), last
    assert not (demo_tools / "demo-worker.log").exists()  # the demo started no worker
    with open_journal(get_settings().resolved_journal_url()) as journal:
        run = journal.get_run("order-44")
        assert run is not None and not run.condemned
        assert journal.list_unwinds("order-44") == []


def test_compensate_local_parallel_undoes_a_recorded_group_and_shows_each_entrys_group(
    demo_tools: Path,
) -> None:
    with (
        open_journal(get_settings().resolved_journal_url()) as journal,
        saga("order-47", journal=journal, tools=TOOLS) as run,
        run.parallel(),
    ):
        run.call("charge", {"amount": 10, "card": "4242"})
        run.call("reserve_stock", {"sku": "A1", "quantity": 1})
    code, output = invoke("compensate", "order-47", "--local", "--parallel", "--json")
    assert code == 0, output
    entries = json.loads(output)["entries"]
    assert [(e["tool_name"], e["group"], e["status"]) for e in entries] == [
        ("reserve_stock", 1, "compensated"),
        ("charge", 1, "compensated"),
    ]


def test_compensating_a_run_the_journal_never_saw_says_no_records_and_exits_5(demo_tools: Path) -> None:
    place("order-1")  # the journal exists; "order-l" is a typo of its id
    result = CliRunner().invoke(main, ["compensate", "order-l", "--local", "--reason", "typo"])
    assert result.exit_code == 5, result.output
    assert (
        "no records: the journal had no run 'order-l'; it is condemned so it can never start" in result.output
    )
    with open_journal(get_settings().resolved_journal_url()) as journal:
        assert run_of(journal, "order-l").condemned  # and so it can never start
    again = CliRunner().invoke(main, ["compensate", "order-l", "--local", "--json"])
    assert again.exit_code == 0, again.output  # known now (condemned): nothing to undo, said by the report


def test_piped_runs_print_one_run_a_line_whole_with_times_in_utc(home: Path) -> None:
    long_id = "order-" + "x" * 150
    place(long_id)
    code, output = invoke("runs")
    [line] = [x for x in output.splitlines() if long_id in x]
    assert line.split("\t")[:4] == [long_id, "finished", "no", "none"]  # whole, on one line
    assert line.split("\t")[5].endswith("Z")  # UTC, saying so


def test_every_commands_help_is_plain_text_without_restructuredtext_markup() -> None:
    commands: list[list[str]] = [[]] + [[name] for name in main.commands] + [["db", "upgrade"]]
    for args in commands:
        result = CliRunner().invoke(main, [*args, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (args, result.output)
        for markup in ("``", ":ref:", ":class:", ":func:", "`"):
            assert markup not in result.output, (args, markup, result.output)
