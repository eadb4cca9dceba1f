"""The shop's forward tasks: each records its one side effect into the order's run (the run id is the
order id), so the chain charge → reserve → confirm, on whichever workers, builds one run that
``compensate_run.delay(order_id)`` unwinds in reverse."""

from __future__ import annotations

from typing import Any

from config.celery import app

from saga_worker.celery import record_call


@app.task(name="shop.charge")
def charge(order_id: str, amount: int) -> Any:
    return record_call(order_id, "charge", {"amount": amount}, id="charge", prompt=f"order {order_id}")


@app.task(name="shop.reserve")
def reserve(order_id: str, sku: str, qty: int) -> Any:
    return record_call(order_id, "reserve", {"sku": sku, "qty": qty}, id="reserve")


@app.task(name="shop.confirm")
def confirm(order_id: str, email: str) -> Any:
    # The last step finishes the run.
    return record_call(order_id, "confirm", {"to": email}, id="confirm", finish=True)


def place_order(order_id: str, *, amount: int, sku: str, qty: int, email: str) -> Any:
    """The order as a chain of forward tasks (a failed step stops it; cancelling is the app's call)."""
    return (
        charge.si(order_id, amount) | reserve.si(order_id, sku, qty) | confirm.si(order_id, email)
    ).delay()
