"""An agent-recorded run unwound by ``saga.compensate_run`` on a real Celery worker (Redis broker,
PostgreSQL journal): each framework's run is indistinguishable in the journal from a scripted one,
so the worker's hooks (``SAGA_TOOLS``) compensate every effect exactly once, in reverse order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

from saga_worker import Journal
from saga_worker.journal.records import RecordStatus
from tests.agents.loops import no_event_loop_left_behind
from tests.agents.orders import FRAMEWORKS, place_order
from tests.agents.shop import executed
from tests.ledger import Ledger

from . import scenarios
from .conftest import Setup, Workers, redis_setup

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
__all__ = ["no_event_loop_left_behind"]  # autouse here too: the frameworks' event loops are closed per test


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str, module_workers: Workers) -> Setup:
    setup = redis_setup(tmp_path_factory.mktemp("agents"), pg_database_url)
    module_workers.start(setup, concurrency=2)
    return setup


@pytest.fixture
def parts(running: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = running.client(), running.journal(), running.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_agent_run_unwound_on_a_worker_compensates_each_effect_once_in_reverse_order(
    framework: str, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    place_order(framework, journal, ledger, run_id)
    assert [(r.suffix, r.status) for r in journal.list_records(run_id)] == [
        (f"call-{n}", RecordStatus.SUCCEEDED) for n in (1, 2, 3)
    ]

    report = scenarios.unwind(client, run_id)
    again = scenarios.unwind(client, run_id)

    assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
        ("notify", "compensated"),
        ("reserve", "compensated"),
        ("charge", "compensated"),
    ]
    assert scenarios.statuses(again) == ["already-compensated"] * 3
    # The ledger (one per module, shared with the worker): the agent's tools executed each call once
    # here, the worker's hooks compensated each once there.
    mine = {k: n for k, n in executed(ledger).items() if k.startswith(f"{run_id}:")}
    assert mine == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}
    assert [c.key for c in ledger.effects() if c.key.startswith(f"{run_id}:comp:")] == [
        f"{run_id}:comp:{s}" for s in scenarios.SUFFIXES
    ]
