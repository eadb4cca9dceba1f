"""Text from the journal never acts on the person reading it, and none that would gets in (issue 21,
item 9): control characters are refused in actors (and in reasons, but for newlines and tabs), reasons
are capped, at every boundary (library, task, CLI, console); whatever the journal holds anyway (an
older version's row, a direct write) is shown with control and bidi characters neutralised, by the
CLI and by the console."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from saga_worker import (
    AuditAction,
    AuditVia,
    InvalidInputError,
    Journal,
    approve,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker import executor as ex
from saga_worker.cli import main
from saga_worker.console.app import create_app
from saga_worker.console.auth import Role, new_token
from saga_worker.core.checks import REASON_MAX
from saga_worker.core.display import neutral
from saga_worker.executor.context import WorkerContext
from saga_worker.journal.records import NewAudit, UnwindState
from saga_worker.settings import SagaSettings, get_settings
from tests.console.clients import console_journal
from tests.ledger import MemoryLedger, order_script, order_tools

# What an attacker types: retitle the window, clear the screen, overwrite the line, reverse the text.
TITLE, CLEAR, CR, RLO = "\x1b]0;owned\x07", "\x1b[2J", "\r", "\u202e"
EVIL_ACTOR = f"mallory{TITLE}"
EVIL_REASON = f"customer asked{CR}{CLEAR}all good{RLO}dlrow"
RAW = ("\x1b", "\x07", "\r", "\u202e")


def place(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    run_durable(run_id, journal=journal, tools=order_tools(ledger), planner=scripted(*order_script()))


# -- refused at the boundaries -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "actor", ["dana\nmallory", "dana\rmallory", f"dana{TITLE}", f"dana{RLO}", "dana\u2028x", "dana\x85"]
)
def test_an_actor_with_a_control_or_bidi_character_is_refused_and_nothing_is_written(
    journal: Journal, run_id: str, actor: str
) -> None:
    place(journal, run_id)
    with pytest.raises(InvalidInputError, match="actor .* holds the control character"):
        compensate_run(run_id, journal=journal, actor=actor, reason="fraud")
    with pytest.raises(InvalidInputError, match="holds the control character"):
        ex.start_unwind(journal, run_id, "u-1", dry_run=False, claim_ttl=5.0, actor=actor)  # the task's
    info = journal.get_run(run_id)
    assert info is not None and not info.condemned and journal.read_audit(run_id) == []


@pytest.mark.parametrize("reason", [EVIL_REASON, "ok\x00", "fine\x7f", "a" * (REASON_MAX + 1)])
def test_a_reason_with_a_control_character_or_longer_than_the_cap_is_refused(
    journal: Journal, run_id: str, reason: str
) -> None:
    place(journal, run_id)
    with pytest.raises(InvalidInputError, match="reason (holds the control character|is 2001 characters)"):
        compensate_run(run_id, journal=journal, reason=reason)
    with pytest.raises(InvalidInputError, match="reason"):
        ex.start_unwind(journal, run_id, "u-1", dry_run=False, claim_ttl=5.0, reason=reason)
    info = journal.get_run(run_id)
    assert info is not None and not info.condemned


def test_a_reason_keeps_its_newlines_and_tabs_and_may_be_as_long_as_the_cap(
    journal: Journal, run_id: str
) -> None:
    place(journal, run_id)
    reason = "line one\n\tline two " + "x" * (REASON_MAX - 20)
    report = compensate_run(run_id, journal=journal, tools={}, reason=reason[:REASON_MAX])
    assert report.reason == reason[:REASON_MAX]


def test_an_approval_by_an_actor_with_a_newline_is_refused(journal: Journal, run_id: str) -> None:
    with pytest.raises(InvalidInputError, match="holds the control character"):
        approve(journal, run_id, "call-1", actor="ops\nadmin")


def test_a_saga_actor_setting_with_a_newline_is_refused_naming_the_setting(
    journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    place(journal, run_id)
    monkeypatch.setenv("SAGA_ACTOR", "ops\nadmin")
    get_settings.cache_clear()
    try:
        with pytest.raises(InvalidInputError, match="^SAGA_ACTOR: actor 'ops\\\\nadmin' holds"):
            compensate_run(run_id, journal=journal)
    finally:
        get_settings.cache_clear()
    info = journal.get_run(run_id)
    assert info is not None and not info.condemned


# -- neutralised wherever it is shown -----------------------------------------------------------------


def poisoned(journal: Journal, run_id: str) -> None:
    """Rows as an older version or a direct write could have left them."""
    place(journal, run_id)
    journal.append_audit(
        NewAudit(run_id, AuditAction.APPROVED, EVIL_ACTOR, AuditVia.CLI, EVIL_REASON, "call-1")
    )
    journal.set_unwind_state(run_id, UnwindState.ATTENTION, note=f"look{CLEAR}{RLO}here")


def test_neutral_spells_out_every_control_and_bidi_character() -> None:
    assert neutral(EVIL_REASON) == "customer asked\\x0d\\x1b[2Jall good\\u202edlrow"
    assert neutral("a\nb\tc", lines=True) == "a\nb\tc" and neutral("a\nb") == "a\\x0ab"


@pytest.fixture
def cli_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Journal]:
    for name in ("SAGA_BROKER_URL", "SAGA_RESULT_BACKEND", "SAGA_REDIS_URL", "SAGA_TOOLS", "SAGA_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGA_JOURNAL_URL", f"sqlite:///{tmp_path}/journal.db")
    monkeypatch.setenv("SAGA_HOME", str(tmp_path / ".saga"))
    get_settings.cache_clear()
    journal = open_journal(f"sqlite:///{tmp_path}/journal.db")
    yield journal
    journal.close()
    get_settings.cache_clear()


@pytest.mark.parametrize("command", [["audit"], ["report"], ["runs"]])
def test_the_cli_shows_stored_escape_sequences_spelled_out_never_raw(
    cli_journal: Journal, run_id: str, command: list[str]
) -> None:
    poisoned(cli_journal, run_id)
    args = [*command, run_id] if command != ["runs"] else command
    result = CliRunner().invoke(main, args, catch_exceptions=False, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert not any(c in result.output for c in RAW), repr(result.output)
    expected = {"audit": "mallory\\x1b]0;owned\\x07", "report": "look\\x1b[2J\\u202ehere"}
    assert expected.get(command[0], "look\\x1b[2J\\u202ehere") in result.output


def test_the_cli_refuses_a_reason_with_an_escape_before_anything_is_sent(
    cli_journal: Journal, run_id: str
) -> None:
    place(cli_journal, run_id)
    result = CliRunner().invoke(main, ["compensate", run_id, "--local", "--reason", EVIL_REASON])
    assert result.exit_code == 1 and "reason holds the control character \\x0d" in result.output
    assert "\x1b" not in result.output
    info = cli_journal.get_run(run_id)
    assert info is not None and not info.condemned


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[TestClient, str, list[Any]]]:
    operator, entry = new_token("alice", Role.OPERATOR)
    settings = SagaSettings(
        home=tmp_path, journal_url=f"sqlite:///{tmp_path}/console.db", console_tokens=entry
    )
    sent: list[Any] = []

    def enqueue(run_id: str, dry_run: bool, **kw: Any) -> str:
        sent.append((run_id, kw))
        return "task-1"

    context = WorkerContext(settings, tools_loader=lambda _spec: order_tools(MemoryLedger()))
    with TestClient(
        create_app(settings, context=context, enqueue=enqueue), base_url="http://127.0.0.1:8350"
    ) as client:
        yield client, operator, sent


def test_the_console_page_shows_stored_escape_sequences_spelled_out_never_raw(
    console: tuple[TestClient, str, list[Any]],
) -> None:
    client, token, _ = console
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    poisoned(console_journal(client), run_id)
    page = client.get(f"/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200
    assert not any(c in page.text for c in RAW)
    assert "mallory\\x1b]0;owned\\x07" in page.text and "\\u202edlrow" in page.text


def test_the_console_refuses_a_reason_with_an_escape_or_past_the_cap_and_enqueues_nothing(
    console: tuple[TestClient, str, list[Any]],
) -> None:
    client, token, sent = console
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    place(console_journal(client), run_id)
    url, auth = f"/api/runs/{run_id}/compensate", {"Authorization": f"Bearer {token}"}
    for reason in (f"fraud{TITLE}", "x" * (REASON_MAX + 1)):
        answer = client.post(url, json={"reason": reason}, headers=auth)
        assert answer.status_code == 400 and "reason" in answer.text
    assert sent == []
