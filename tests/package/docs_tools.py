"""The tools a worker loads for the documentation's Celery snippets (``SAGA_TOOLS=tests.package.docs_tools:TOOLS``):
the same names and shapes as the getting-started guide's, on a provider of this process."""

from __future__ import annotations

from typing import Any

from saga_worker import RecoverResult, Tool

_done: dict[str, dict[str, Any]] = {}


def _apply(key: str, what: str) -> dict[str, Any]:
    return _done.setdefault(key, {"id": f"{what}-{len(_done) + 1}", "key": key})


TOOLS = {
    "charge": Tool(
        execute=lambda input, opts: _apply(opts.idempotency_key, f"charge {input['amount']}"),
        compensate=lambda input, output, opts: _apply(opts.idempotency_key, f"refund {output['id']}"),
        recover=lambda input, opts: RecoverResult(done=opts.idempotency_key in _done),
    ),
    "reserve": Tool(
        execute=lambda input, opts: _apply(opts.idempotency_key, f"reserve {input['sku']}"),
        compensate=lambda input, output, opts: _apply(opts.idempotency_key, f"release {output['id']}"),
    ),
    "notify": Tool(execute=lambda input, opts: _apply(opts.idempotency_key, "confirmation")),
}
