"""Prometheus metrics as a scrape sees them: counted in the worker's pool children, summed and served
by the worker's main process, and the console's gauge of runs needing a person."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from saga_worker import Journal
from saga_worker.journal.records import UnwindState
from tests.integration.scenarios import place_order, statuses, unwind
from tests.ledger import Ledger
from tests.reads import run_of

from .conftest import Deployment, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def parts(deployment: Deployment) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = deployment.setup.client(), deployment.setup.journal(), deployment.setup.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"gave up waiting for {what}")


def test_a_workers_metrics_count_unwinds_steps_hooks_take_overs_and_sweeper_re_drives(
    deployment: Deployment, parts: tuple[Celery, Journal, Ledger]
) -> None:
    client, journal, ledger = parts
    setup = deployment.setup
    clean, refused, killed = (f"m-{name}-{uuid.uuid4().hex[:6]}" for name in ("clean", "refused", "killed"))
    for run_id in (clean, refused, killed):
        place_order(journal, ledger, run_id)

    assert statuses(unwind(client, clean)) == ["compensated"] * 3
    refusal = setup.control_file(refused, "fail", "reserve")
    assert statuses(unwind(client, refused)) == ["compensated", "failed", "not-attempted"]
    # The pool child dies at the start of charge's hook: the redelivered step waits out the dead
    # holder's lease and takes the claim over.
    setup.control_file(killed, "kill", "charge")
    assert statuses(unwind(client, killed)) == ["compensated"] * 3

    # The sweeper re-drives the halted run once it is due (the refusal is gone by then).
    refusal.unlink()

    def redriven() -> bool:
        outcome = client.signature("saga.retry_uncertain").delay().get(timeout=30)
        return refused in outcome["redriven"]

    wait_until(redriven, "the sweeper to re-drive the halted run")
    wait_until(
        lambda: run_of(journal, refused).unwind_state is UnwindState.COMPLETE,
        "the re-driven unwind to complete",
    )

    scraped = samples(deployment.worker.scrape())
    assert value(scraped, "saga_unwinds_started_total") == 4
    assert value(scraped, "saga_unwinds_finished_total", outcome="complete") == 3
    assert value(scraped, "saga_unwinds_finished_total", outcome="halted-failed") == 1
    # clean 3 + refused 1 + killed 3 + the re-drive's 2 (reserve, charge); notify was already undone.
    assert value(scraped, "saga_compensation_steps_total", status="compensated") == 9
    assert value(scraped, "saga_compensation_steps_total", status="failed") == 1
    assert value(scraped, "saga_compensation_steps_total", status="already-compensated") == 1
    assert value(scraped, "saga_claim_takeovers_total") == 1
    assert value(scraped, "saga_sweeper_redrives_total") == 1
    assert value(scraped, "saga_compensate_hook_seconds_count", tool="reserve", outcome="raised") == 1
    # charge's hook returned three times (clean, killed's take-over, the re-drive); the killed
    # attempt never returned.
    assert value(scraped, "saga_compensate_hook_seconds_count", tool="charge", outcome="returned") == 3


def test_the_consoles_metrics_need_a_token_and_count_the_runs_needing_attention(
    deployment: Deployment, parts: tuple[Celery, Journal, Ledger], tokens: Tokens
) -> None:
    _, journal, ledger = parts
    url = deployment.console.url + "/metrics"

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {tokens.viewer}"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            return samples(answer.read().decode())

    before = value(scrape(), "saga_runs_needing_attention", kind="attention")
    stuck = f"m-stuck-{uuid.uuid4().hex[:6]}"
    place_order(journal, ledger, stuck)
    journal.condemn(stuck)
    journal.set_unwind_state(stuck, UnwindState.ATTENTION, note="gave up after 8 re-drives")
    assert value(scrape(), "saga_runs_needing_attention", kind="attention") == before + 1
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=5)
    assert info.value.code == 401
