"""No password leaves the process (issue 10, item 5): one redaction, used by every surface.

The surfaces a worker needs are checked on real workers in tests/integration (its log, the stored
task result, the conf Flower shows); here the text rules, the CLI, a log handler and the conf."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from saga_worker import JournalError, open_journal
from saga_worker.celery import make_app
from saga_worker.celery.logs import redact_saga_logs
from saga_worker.cli import main
from saga_worker.core.redact import MAX_SCANNED, redact_exception, redact_logging, redact_text, redact_url
from saga_worker.settings import SagaSettings, get_settings

SECRET = "s3cret-Pa55"
# Each holds SECRET as a password; several do not parse as a URL at all.
LEAKY = [
    f"postgresql+psycopg://saga:{SECRET}@db.internal:5432/journal",
    f"postgres ql://saga:{SECRET}@db.internal/journal",  # a space in the scheme: unparseable
    f"postgresql+psycopg://saga:{SECRET}@db.internal:notaport/journal",
    f"postgresql://saga:{SECRET}@with@at@db.internal/journal",  # an '@' in the password
    f"postgresql://saga:{SECRET}/with/slash@db.internal/journal",
    f"redis://:{SECRET}@127.0.0.1:6379/0",
    f"amqp://guest:{SECRET}@127.0.0.1:5672//",
    f"postgresql://db.internal/journal?user=saga&password={SECRET}",
]


@pytest.mark.parametrize("url", LEAKY)
def test_a_url_password_is_hidden_whether_or_not_the_url_parses(url: str) -> None:
    shown = redact_url(url)
    assert SECRET not in shown
    assert "db.internal" in shown or "127.0.0.1" in shown
    inside = f"cannot open journal {url!r}: bad"
    assert SECRET not in redact_text(inside) and redact_text(inside).startswith("cannot open journal '")


def test_a_url_without_a_password_and_plain_text_are_left_as_written() -> None:
    for text in ["postgresql://saga@db/journal", "sqlite:///.saga/journal.db", "user@example.com said: no"]:
        assert redact_text(text) == text


@pytest.mark.parametrize("url", LEAKY[:3])
def test_open_journal_on_a_url_with_a_password_names_it_without_the_password(url: str) -> None:
    with pytest.raises(JournalError) as failed:
        open_journal(url).close()
    assert SECRET not in str(failed.value) and SECRET not in json.dumps(failed.value.detail)


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("SAGA_BROKER_URL", "SAGA_RESULT_BACKEND", "SAGA_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGA_TOOLS", "saga_worker.demo:TOOLS")  # tools named, so the journal is what fails
    monkeypatch.setenv("SAGA_HOME", str(tmp_path / ".saga"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


@pytest.mark.parametrize("url", LEAKY[1:4])
@pytest.mark.parametrize(
    "command", [["runs"], ["report", "order-1"], ["compensate", "order-1", "--local"], ["db", "upgrade"]]
)
def test_cli_error_for_a_journal_url_that_does_not_open_holds_no_password(
    cli_home: Path, monkeypatch: pytest.MonkeyPatch, url: str, command: list[str]
) -> None:
    monkeypatch.setenv("SAGA_JOURNAL_URL", url)
    get_settings.cache_clear()
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:") and "journal" in line
    assert SECRET not in result.output


def test_a_log_handler_under_redaction_writes_no_password_from_messages_arguments_or_tracebacks() -> None:
    logger = logging.getLogger("tests.redact")
    logger.propagate = False
    stream = io.StringIO()
    logger.addHandler(logging.StreamHandler(stream))
    redact_logging(logger)
    try:
        logger.warning(f"connecting to {LEAKY[0]}")
        logger.warning("journal %s unreachable", LEAKY[1])
        try:
            try:
                raise ValueError(f"bad url {LEAKY[3]}")
            except ValueError as inner:
                raise RuntimeError(f"cannot open {LEAKY[2]}") from inner
        except RuntimeError:
            logger.exception("task failed")
    finally:
        logger.handlers.clear()
    written = stream.getvalue()
    assert SECRET not in written
    assert "task failed" in written and "ValueError: bad url" in written and "db.internal" in written


def test_an_exception_is_redacted_in_place_through_its_chain() -> None:
    try:
        try:
            raise ValueError(LEAKY[4])
        except ValueError:
            raise JournalError(f"cannot open journal {LEAKY[1]!r}", url=LEAKY[1]) from None
    except JournalError as exc:
        caught = exc
    caught.__context__ = ValueError(LEAKY[4])
    redact_exception(caught)
    assert SECRET not in str(caught) and SECRET not in str(caught.__context__)
    assert SECRET not in json.dumps(caught.detail)


def test_the_celery_conf_a_worker_shows_flower_holds_no_password() -> None:
    settings = SagaSettings(
        journal_url=LEAKY[0],
        broker_url=f"redis://default:{SECRET}@127.0.0.1:6379/5",
        result_backend=f"redis://default:{SECRET}@127.0.0.1:6379/5",
        redis_url=f"redis://default:{SECRET}@127.0.0.1:6379/6",
    )
    app = make_app(settings, main="saga-test-conf")
    try:
        # What the `conf` remote-control command answers (Flower's worker page, `celery inspect conf`).
        for with_defaults in (False, True):
            shown = json.dumps(app.conf.table(with_defaults=with_defaults), default=str)
            assert SECRET not in shown
        assert "redbeat_redis_url" in app.conf.table()
    finally:
        app.close()


def test_beat_connects_with_the_real_redis_url_kept_out_of_the_conf(redis_url: str) -> None:
    from saga_worker.celery.beat import ResilientRedBeatScheduler

    # Redis's default user without a password accepts any: a URL with one still reaches it.
    real = redis_url.replace("redis://", f"redis://default:{SECRET}@", 1)
    settings = SagaSettings(redis_url=real, broker_url="memory://", result_backend="cache+memory://")
    app = make_app(settings, main="saga-test-beat")
    try:
        assert SECRET not in str(app.conf.redbeat_redis_url)
        scheduler = ResilientRedBeatScheduler(app, lazy=True)
        assert app.redbeat_conf.redis_url == real  # type: ignore[attr-defined]  # set by redbeat, which has no types
        scheduler.close()
    finally:
        app.close()


# -- a long token costs one pass (issue 21, item 5) ----------------------------------------------------

MEGABYTE = 1_000_000


@pytest.mark.timeout(30)  # the backtracking regex took hours on these; one pass takes milliseconds
@pytest.mark.parametrize(
    "text",
    [
        "a" * MEGABYTE + " x=1",  # a letter/digit token, then something that makes redaction look
        "a1" * (MEGABYTE // 2) + "://",
        "x=" + "a://" * (MEGABYTE // 4),
        ("Z9" * 40_000 + "://host ") * 12,
    ],
    ids=["token", "token-then-scheme", "many-schemes", "long-schemes"],
)
def test_a_megabyte_of_text_is_redacted_in_one_pass_and_cut_with_a_note(text: str) -> None:
    shown = redact_text(text)
    assert len(shown) <= MAX_SCANNED + 100
    assert shown.endswith("characters not shown]")


def test_a_password_past_the_scanned_length_is_not_shown_even_in_part() -> None:
    for url in LEAKY:
        for pad in (MAX_SCANNED - len(url) // 2, MAX_SCANNED - 20, MAX_SCANNED + 5):
            shown = redact_text("x" * pad + " " + url + " and more")
            assert SECRET not in shown and SECRET[:6] not in shown, (pad, url)


def test_the_workers_log_filter_redacts_saga_workers_records_and_leaves_the_hosts_own_alone() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    root = logging.getLogger("tests.redact.worker")
    root.propagate = False
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    redact_saga_logs(root)
    try:
        logging.getLogger("tests.redact.worker.host").info("host task: %s", LEAKY[0])
        logging.getLogger("tests.redact.worker.saga_worker").info("not ours either: %s", LEAKY[0])
        trace = logging.getLogger("tests.redact.worker.celery.app.trace")
        trace.error("Task %(name)s raised: %(exc)s", {"name": "host.union", "exc": LEAKY[0]})
        trace.error("Task %(name)s raised: %(exc)s", {"name": "saga.compensate_run", "exc": LEAKY[0]})
        record = logging.LogRecord("saga_worker.executor", logging.INFO, "", 0, "ours: %s", (LEAKY[0],), None)
        handler.handle(record)
    finally:
        root.handlers.clear()
    lines = stream.getvalue().splitlines()
    assert [SECRET in line for line in lines] == [True, True, True, False, False]
    assert lines[3].startswith("tests.redact.worker.celery.app.trace Task saga.compensate_run raised")
    assert lines[4].startswith("saga_worker.executor ours: postgresql+psycopg://saga:***@db.internal")
