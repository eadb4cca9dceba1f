"""The project's tools, in a module of their own (SAGA_TOOLS): the demo's; two that wait for a
person: ``refund`` before it executes, ``reserve``'s compensation before it runs; and ``pay_in_db``,
whose effect is a ``Payment`` written with the ORM in the transaction that records it."""

from typing import Any

from saga_worker import CallOptions, Tool
from saga_worker.contrib.demo import TOOLS as DEMO

UNDONE: list[str] = []  # what each compensation undid, in this process (the admin's tests read it)


def _execute(name: str) -> Any:
    def run(input: Any, opts: CallOptions) -> Any:
        return {"id": f"{name}-{opts.tool_call_id}"}

    return run


def _compensate(name: str) -> Any:
    def undo(input: Any, output: Any, opts: CallOptions) -> None:
        UNDONE.append(name)

    return undo


# --8<-- [start:in-db]
def _pay_in_db(input: Any, opts: CallOptions) -> Any:
    from .models import Payment

    payment = Payment.objects.create(key=opts.idempotency_key, amount=input["amount"])
    if input.get(
        "twice"
    ):  # the database refuses the second (IntegrityError): on PostgreSQL, an aborted transaction
        Payment.objects.create(key=opts.idempotency_key, amount=input["amount"])
    if input.get("fail"):
        raise RuntimeError("the card was declined after the payment row was written")
    return {"payment": payment.pk}


def _refund_in_db(input: Any, output: Any, opts: CallOptions) -> None:
    from .models import Payment

    Payment.objects.filter(pk=output["payment"]).delete()  # (opts.idempotency_key is the refund's own)


# --8<-- [end:in-db]


def _counted(name: str, undo: Any) -> Any:
    """``undo``, noted in ``UNDONE`` when it runs (the tests see whether a compensation ran at all,
    even where what it wrote rolled back)."""

    def counted(input: Any, output: Any, opts: CallOptions) -> None:
        UNDONE.append(name)
        undo(input, output, opts)

    return counted


TOOLS = {
    **DEMO,
    "pay": Tool(_execute("pay"), _compensate("pay")),
    "reserve": Tool(_execute("reserve"), _compensate("reserve"), compensate_needs_approval=True),
    "refund": Tool(_execute("refund"), _compensate("refund"), needs_approval=True),
    # the ORM, in the app's transaction
    "pay_in_db": Tool(_pay_in_db, _counted("pay_in_db", _refund_in_db), in_transaction=True),
    "check_stock": Tool(lambda input, opts: {"in_stock": True}, side_effect=False),
}
