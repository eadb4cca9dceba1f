"""Place an order (a saga() block, then a chain of forward tasks sent once the order is committed),
read it, cancel it (compensate_run.delay)."""

import json
from typing import Any

from celery import chain
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from saga_worker import OpenTransactionError, saga
from saga_worker.celery import compensate_run
from saga_worker.contrib.django import journal, tools

from . import tasks
from .models import Effect, Order


class Declined(Exception):
    """The order is refused after its row was written: the transaction rolls back."""


# --8<-- [start:place]
def start(order_id: str, amount: int) -> None:
    """After the order's transaction committed: the hold in a saga() block (in this process), then
    the charge and reservation on the workers."""
    with saga(tasks.run_id(order_id), journal=journal(), tools=tools(), finish=False) as run:
        run.call("hold", {"order_id": order_id, "amount": amount}, id="hold")
    chain(tasks.charge.si(order_id, amount), tasks.reserve.si(order_id)).delay()


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    body: dict[str, Any] = json.loads(request.body or b"{}")
    order_id, amount = str(body["order_id"]), int(body["amount"])
    try:
        with transaction.atomic():
            Order.objects.create(order_id=order_id, amount=amount)
            if body.get("hold_inside_transaction"):
                # Refused: the journal cannot follow this transaction (OpenTransactionError).
                start(order_id, amount)
            # Sent only if the order commits: a rolled-back order starts nothing.
            transaction.on_commit(lambda: start(order_id, amount))
            if body.get("decline"):
                raise Declined(order_id)
    except Declined:
        return JsonResponse({"order_id": order_id, "status": "declined"}, status=409)
    except OpenTransactionError as exc:
        return JsonResponse({"order_id": order_id, "error": str(exc)}, status=409)
    return JsonResponse({"order_id": order_id, "run_id": tasks.run_id(order_id)}, status=201)


# --8<-- [end:place]


@require_GET
def order(request: HttpRequest, order_id: str) -> JsonResponse:
    run = journal().get_run(tasks.run_id(order_id))
    return JsonResponse(
        {
            "order_id": order_id,
            "placed": Order.objects.filter(order_id=order_id).exists(),
            "run": None if run is None else {"status": run.status.value, "condemned": run.condemned},
            "effects": sorted(Effect.objects.filter(order_id=order_id).values_list("kind", flat=True)),
        }
    )


@csrf_exempt
@require_POST
def cancel_order(request: HttpRequest, order_id: str) -> JsonResponse:
    result = compensate_run.delay(tasks.run_id(order_id), reason="cancelled by the customer")
    return JsonResponse({"order_id": order_id, "task_id": result.id}, status=202)
