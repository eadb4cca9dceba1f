"""The shop's tools: each step's effect and the hook that undoes it. Importing the models at the top
is fine: the worker loads this module (SAGA_TOOLS) on first use, after django.setup()."""

from typing import Any

from saga_worker import CallOptions, RecoverResult, Tool

from .models import Effect


def _write(kind: str, order_id: str, key: str) -> dict[str, Any]:
    effect, _ = Effect.objects.get_or_create(key=key, defaults={"kind": kind, "order_id": order_id})
    return {"effect": effect.kind, "key": effect.key}


def _tool(kind: str, undo: str) -> Tool:
    def execute(input: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
        return _write(kind, input["order_id"], opts.idempotency_key)

    def compensate(input: dict[str, Any], output: Any, opts: CallOptions) -> dict[str, Any]:
        return _write(undo, input["order_id"], opts.idempotency_key)

    def recover(input: dict[str, Any], opts: CallOptions) -> RecoverResult:
        found = Effect.objects.filter(key=opts.idempotency_key).first()
        return RecoverResult(done=found is not None, output=None if found is None else {"key": found.key})

    return Tool(execute, compensate, recover, description=f"{kind}, undone by {undo}")


TOOLS = {
    "hold": _tool("hold", "release_hold"),  # the view's saga() block
    "charge": _tool("charge", "refund"),  # forward task
    "reserve": _tool("reserve", "release"),  # forward task
}
