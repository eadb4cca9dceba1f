"""Every statement an unwind sends to PostgreSQL fits psycopg's parsing cache, in process and on workers.

psycopg rewrites a statement's placeholders (``%(name)s`` as ``$1``) before sending it, and keeps
the result only for a statement of at most ``MAX_CACHED_STATEMENT_LENGTH`` bytes and
``MAX_CACHED_STATEMENT_PARAMS`` parameters: a longer one is parsed again on every call (~150 µs
here, once per step for the merged outcome-and-claim). The limits are psycopg's internals
(``psycopg/_queries.py``, since 3.1.11), read from it here; pyproject.toml bounds psycopg below
3.4, so that a release that moves them is checked here before it is allowed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from saga_worker import Journal, Tool, ToolCall, compensate_run, run_durable, scripted
from saga_worker import executor as ex
from saga_worker.executor import Step
from saga_worker.journal.driver import Prepared
from saga_worker.locks.memory import MemoryStepLock

_queries = pytest.importorskip("psycopg._queries")  # the limits below; no psycopg, no PostgreSQL tests
STEPS = 5
LIMITS = (_queries.MAX_CACHED_STATEMENT_LENGTH, _queries.MAX_CACHED_STATEMENT_PARAMS)


def _noop(*_args: object) -> dict[str, bool]:
    return {"ok": True}


def _recorded(journal: Journal, run_id: str) -> dict[str, Tool]:
    tools = {f"t{i}": Tool(execute=_noop, compensate=_noop) for i in range(STEPS)}
    calls = [ToolCall(f"t{i}", {"i": i}) for i in range(STEPS)]
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=STEPS + 1)
    return tools


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple[int, int]]]:
    """Each statement sent from here on: its text's length in bytes and how many parameters it took
    (``Prepared.bind`` gives the driver every statement's parameters, whichever way it is sent)."""
    seen: dict[str, tuple[int, int]] = {}
    bind = Prepared.bind

    def recording(self: Prepared, params: Any) -> Any:
        bound = bind(self, params)
        seen[self.sql] = (len(self.sql.encode()), len(bound))
        return bound

    monkeypatch.setattr(Prepared, "bind", recording)
    yield seen


def _over(sent: dict[str, tuple[int, int]]) -> list[str]:
    length, params = LIMITS
    return [
        f"{n} bytes, {p} parameters: {sql[:80]}…" for sql, (n, p) in sent.items() if n > length or p > params
    ]


@pytest.mark.backends("postgres")
def test_every_statement_of_an_in_process_unwind_fits_psycopgs_parsing_cache(
    journal: Journal, run_id: str, sent: dict[str, tuple[int, int]]
) -> None:
    tools = _recorded(journal, run_id)
    sent.clear()

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert [e.status.value for e in report.entries] == ["compensated"] * STEPS
    assert len(sent) > 3  # the tombstone's, the merged steps', the end state's
    assert _over(sent) == []


@pytest.mark.backends("postgres")
def test_every_statement_of_a_workers_unwind_fits_psycopgs_parsing_cache(
    journal: Journal, run_id: str, sent: dict[str, tuple[int, int]]
) -> None:
    tools = _recorded(journal, run_id)
    lock = MemoryStepLock()
    sent.clear()

    nxt: object = ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=5.0)
    while isinstance(nxt, Step):
        nxt = ex.run_step(journal, tools, run_id, "u", nxt.suffix, claim_ttl=5.0, lock=lock)
    report = ex.finalize_unwind(journal, run_id, "u")

    assert [e.status.value for e in report.entries] == ["compensated"] * STEPS
    assert _over(sent) == []
