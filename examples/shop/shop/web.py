"""The shop's HTTP API: place an order (a chain of forward tasks), look at it, cancel it.

uvicorn shop.web:api
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

import config  # noqa: F401  (the shop's Celery app, with the saga tasks installed on it)
from saga_worker import Journal, open_journal
from saga_worker.celery import compensate_run
from saga_worker.settings import get_settings

from . import store, tasks

api = FastAPI(title="shop")


class Order(BaseModel):
    sku: str = Field(min_length=1, max_length=100)
    qty: int = Field(gt=0)
    amount: int = Field(gt=0)
    email: str = Field(min_length=3, max_length=300)


@lru_cache(maxsize=1)
def journal() -> Journal:
    return open_journal(get_settings().resolved_journal_url())


@api.post("/stock/{sku}", status_code=204)
def add_stock(sku: str, qty: int) -> None:
    store.add_stock(sku, qty)


@api.post("/orders", status_code=202)
def place(order: Order) -> dict[str, str]:
    order_id = f"order-{uuid.uuid4().hex[:10]}"
    tasks.place_order(order_id, amount=order.amount, sku=order.sku, qty=order.qty, email=order.email)
    return {"order_id": order_id}


@api.get("/orders/{order_id}")
def show(order_id: str) -> dict[str, Any]:
    run = journal().get_run(order_id)
    if run is None:
        raise HTTPException(404, f"no order {order_id!r}")
    return {
        "order_id": order_id,
        "status": run.status.value,  # running, finished, failed
        "error": run.error,
        "cancelled": run.condemned,
        "unwind": run.unwind_state.value,  # none, pending, complete, incomplete, attention
        "steps": [{"tool": r.tool_name, "status": r.status.value} for r in journal().list_records(order_id)],
        **store.order_view(order_id),
        "stock_left": {
            r["sku"]: store.available(r["sku"]) for r in store.order_view(order_id)["reservations"]
        },
    }


@api.post("/orders/{order_id}/cancel", status_code=202)
def cancel(order_id: str, wait: bool = False) -> dict[str, Any]:
    """Unwind the order on the workers; with ``wait``, answer with saga-worker's report."""
    if journal().get_run(order_id) is None:
        raise HTTPException(404, f"no order {order_id!r}")
    result = compensate_run.delay(order_id)
    if not wait:
        return {"order_id": order_id, "task_id": result.id}
    return {"order_id": order_id, "task_id": result.id, "report": result.get(timeout=60)}
