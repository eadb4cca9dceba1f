"""The sample order: charge the card, reserve stock, send the confirmation email.

The provider is fake but honest: a SQLite file (``SAGA_DEMO_PROVIDER``, default
``<SAGA_HOME>/provider.db``) that deduplicates every operation on its idempotency key, the way a
payment API does, so a re-driven hook never refunds twice. ``TOOLS`` is what the demo's worker loads
(``saga-worker demo`` names ``SAGA_TOOLS=saga_worker.demo:TOOLS`` for it; no other worker ever
falls back to these sample tools).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..recording.planning import ToolCall, scripted
from ..recording.tools import CallOptions, RecoverResult, Tool
from ..settings import get_settings


class FakeProvider:
    """Charges, reservations, refunds and emails, one row per idempotency key (the first write wins)."""

    def __init__(self, path: str | Path | None = None) -> None:
        default = get_settings().home / "provider.db"
        self.path = Path(path or os.environ.get("SAGA_DEMO_PROVIDER") or default).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS operations (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                "detail TEXT NOT NULL, at REAL NOT NULL)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def apply(self, key: str, kind: str, detail: dict[str, Any]) -> dict[str, Any]:
        """Do the operation once per key; a repeat returns the first one's result."""
        db = self._db()
        try:
            db.execute(
                "INSERT OR IGNORE INTO operations VALUES (?, ?, ?, ?)",
                (key, kind, json.dumps(detail, sort_keys=True), time.time()),
            )
            row = db.execute("SELECT detail FROM operations WHERE key = ?", (key,)).fetchone()
        finally:
            db.close()
        return dict(json.loads(row[0]), key=key)

    def exists(self, key: str) -> dict[str, Any] | None:
        db = self._db()
        try:
            row = db.execute("SELECT detail FROM operations WHERE key = ?", (key,)).fetchone()
        finally:
            db.close()
        return None if row is None else dict(json.loads(row[0]), key=key)

    def operations(self) -> list[tuple[str, str, dict[str, Any]]]:
        db = self._db()
        try:
            rows = db.execute("SELECT key, kind, detail FROM operations ORDER BY at").fetchall()
        finally:
            db.close()
        return [(k, kind, json.loads(d)) for k, kind, d in rows]


def provider() -> FakeProvider:
    return FakeProvider()


def _charge(input: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
    return provider().apply(
        opts.idempotency_key, "charge", {"amount": input["amount"], "card": input["card"]}
    )


def _refund(input: dict[str, Any], output: dict[str, Any], opts: CallOptions) -> None:
    provider().apply(opts.idempotency_key, "refund", {"amount": input["amount"], "charge": output["key"]})


def _charge_recover(input: dict[str, Any], opts: CallOptions) -> RecoverResult:
    found = provider().exists(opts.idempotency_key)
    return RecoverResult(done=found is not None, output=found)


def _reserve(input: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
    return provider().apply(
        opts.idempotency_key, "reserve", {"sku": input["sku"], "quantity": input["quantity"]}
    )


def _release(input: dict[str, Any], output: dict[str, Any], opts: CallOptions) -> None:
    provider().apply(opts.idempotency_key, "release", {"sku": input["sku"], "reservation": output["key"]})


def _send_email(input: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
    return provider().apply(opts.idempotency_key, "email", {"to": input["to"], "subject": input["subject"]})


TOOLS: dict[str, Tool] = {
    "charge": Tool(_charge, _refund, _charge_recover, description="Charge the customer's card."),
    "reserve_stock": Tool(_reserve, _release, description="Hold stock for the order."),
    # An email cannot be unsent: no compensate hook, and the report says so (skipped-no-hook).
    "send_email": Tool(_send_email, description="Send the order confirmation."),
}


def order_planner(order_id: str = "A-1001") -> Any:
    return scripted(
        ToolCall("charge", {"amount": 4200, "card": "tok_visa"}, id="charge"),
        ToolCall("reserve_stock", {"sku": "MUG-1", "quantity": 2}, id="reserve"),
        ToolCall(
            "send_email", {"to": "ada@example.com", "subject": f"Order {order_id} confirmed"}, id="email"
        ),
        final=f"order {order_id} placed",
    )
