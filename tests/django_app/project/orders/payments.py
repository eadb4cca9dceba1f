"""What the in_transaction tests share: a run paying with the ORM tool inside the caller's
transaction, and what the database holds afterwards, read as the journal's own connection and the
ORM read it."""

from typing import Any

from saga_worker import saga
from saga_worker.contrib.django import journal, tools

from .models import Payment


class Rollback(Exception):
    """Raised to leave an atomic() block, which rolls it back."""


def paid(run_id: str) -> list[int]:
    """The amounts of the payments the run's calls wrote (their keys name the run)."""
    return sorted(p.amount for p in Payment.objects.all() if run_id in p.key)


def records(run_id: str) -> list[tuple[str, str, bool]]:
    """The run's records as the journal's own connection reads them: (tool, status, had no effect)."""
    return [(r.tool_name, r.status.value, r.had_no_effect) for r in journal().list_records(run_id)]


def run_status(run_id: str) -> str | None:
    run = journal().get_run(run_id)
    return None if run is None else run.status.value


def pay(run_id: str, amount: int, **more: Any) -> Any:
    with saga(run_id, journal=journal(), tools=tools()) as run:
        return run.call("pay_in_db", {"amount": amount, **more})
