"""The shop's side effects as saga-worker tools: what each does, how it is undone, how to tell
whether an interrupted one happened (``recover``: the store knows every key it has seen)."""

from __future__ import annotations

from typing import Any

from saga_worker import CallOptions, RecoverResult, tool

from . import store


def _refund(input: Any, output: Any, opts: CallOptions) -> None:
    store.refund(opts.idempotency_key, output["payment"])


def _charged(input: Any, opts: CallOptions) -> RecoverResult:
    done = store.exists(store.payments, opts.idempotency_key)
    return RecoverResult(done=done, output={"payment": opts.idempotency_key, "amount": input["amount"]})


@tool(compensate=_refund, recover=_charged)
def charge(input: Any, opts: CallOptions) -> Any:
    """Charge the customer."""
    return store.charge(opts.idempotency_key, opts.run_id, input["amount"])


def _release(input: Any, output: Any, opts: CallOptions) -> None:
    store.release(opts.idempotency_key, output["reservation"])


def _reserved(input: Any, opts: CallOptions) -> RecoverResult:
    done = store.exists(store.reservations, opts.idempotency_key)
    return RecoverResult(done=done, output={"reservation": opts.idempotency_key, **input})


@tool(compensate=_release, recover=_reserved)
def reserve(input: Any, opts: CallOptions) -> Any:
    """Reserve the stock."""
    return store.reserve(opts.idempotency_key, opts.run_id, input["sku"], input["qty"])


def _apologise(input: Any, output: Any, opts: CallOptions) -> None:
    store.send_email(opts.idempotency_key, opts.run_id, input["to"], f"Order {opts.run_id} cancelled")


@tool(compensate=_apologise, idempotent=True)  # the mailer deduplicates on the key
def confirm(input: Any, opts: CallOptions) -> Any:
    """Email the confirmation."""
    return store.send_email(opts.idempotency_key, opts.run_id, input["to"], f"Order {opts.run_id} confirmed")


TOOLS = {"charge": charge, "reserve": reserve, "confirm": confirm}
