"""A ledger that test hooks append to, shared by threads and OS processes.

Every hook call appends a row ``(key, pid, at)`` to ``calls`` (raw: a hook called twice shows twice).
``effect(key)`` also inserts into ``effects``, whose key is UNIQUE, the way a provider deduplicates on
an idempotency key: a second effect with the same key is refused and counted, never stored twice.

``open_ledger(journal_url)`` gives an in-process ledger for ``memory://`` and, for a SQL journal, one
that every process opening the same journal URL and scope shares: a SQLite file next to the journal's,
or two tables in the journal's PostgreSQL database (rows tagged by ``scope``, so tests never mix).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from saga_worker import CallOptions, Tool, ToolCall


@dataclass(frozen=True)
class Call:
    key: str
    pid: int
    at: float
    what: str


class Ledger:
    """What a hook may do: note a call, and have an effect (once per key)."""

    scope: str
    url: str

    def call(self, key: str, what: str = "") -> None:
        raise NotImplementedError

    def effect(self, key: str, what: str = "") -> bool:
        """Note the call and apply the effect; False (nothing stored) if this key's effect already happened."""
        raise NotImplementedError

    def calls(self, what: str | None = None) -> list[Call]:
        raise NotImplementedError

    def effects(self) -> list[Call]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- questions tests ask -----------------------------------------------------------------------
    def call_counts(self, what: str | None = None) -> Counter[str]:
        """Calls per key; ``what`` keeps those whose label starts with it (``"compensate"``)."""
        return Counter(c.key for c in self.calls() if what is None or c.what.startswith(what))

    def effect_counts(self, what: str | None = None) -> Counter[str]:
        return Counter(c.key for c in self.effects() if what is None or c.what.startswith(what))

    def whats(self) -> list[str]:
        return [c.what for c in self.calls()]


class MemoryLedger(Ledger):
    def __init__(self, scope: str = "") -> None:
        self.scope = scope or uuid.uuid4().hex[:12]
        self.url = "memory://"
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._effects: dict[str, Call] = {}

    def call(self, key: str, what: str = "") -> None:
        with self._lock:
            self._calls.append(Call(key, os.getpid(), time.time(), what))

    def effect(self, key: str, what: str = "") -> bool:
        with self._lock:
            row = Call(key, os.getpid(), time.time(), what)
            self._calls.append(row)
            if key in self._effects:
                return False
            self._effects[key] = row
            return True

    def calls(self, what: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if what is None or c.what == what]

    def effects(self) -> list[Call]:
        with self._lock:
            return list(self._effects.values())


_meta = sa.MetaData()
_calls = sa.Table(
    "saga_test_ledger_calls",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(40), nullable=False),
    sa.Column("key", sa.String(600), nullable=False),
    sa.Column("what", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("at", sa.Double, nullable=False),
)
_effects = sa.Table(
    "saga_test_ledger_effects",
    _meta,
    sa.Column("scope", sa.String(40), nullable=False),
    sa.Column("key", sa.String(600), nullable=False),
    sa.Column("what", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("at", sa.Double, nullable=False),
    sa.UniqueConstraint("scope", "key", name="uq_saga_test_ledger_effect"),
)


class SqlLedger(Ledger):
    def __init__(self, url: str, scope: str) -> None:
        self.url = url
        self.scope = scope
        if url.startswith("sqlite"):
            self.engine = sa.create_engine(url, connect_args={"timeout": 30.0, "check_same_thread": False})
        else:
            self.engine = sa.create_engine(url, pool_size=4, max_overflow=8)
        try:
            _meta.create_all(self.engine, checkfirst=True)
        except sa.exc.IntegrityError:  # another process created the tables at the same moment
            pass
        except sa.exc.ProgrammingError:
            pass

    def call(self, key: str, what: str = "") -> None:
        with self.engine.begin() as conn:
            conn.execute(
                _calls.insert().values(scope=self.scope, key=key, what=what, pid=os.getpid(), at=time.time())
            )

    def effect(self, key: str, what: str = "") -> bool:
        self.call(key, what)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    _effects.insert().values(
                        scope=self.scope, key=key, what=what, pid=os.getpid(), at=time.time()
                    )
                )
        except sa.exc.IntegrityError:
            return False
        return True

    def _rows(self, table: sa.Table, what: str | None) -> list[Call]:
        query = sa.select(table.c.key, table.c.pid, table.c.at, table.c.what).where(
            table.c.scope == self.scope
        )
        if what is not None:
            query = query.where(table.c.what == what)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(table.c.at)).all()
        return [Call(r.key, r.pid, r.at, r.what) for r in rows]

    def calls(self, what: str | None = None) -> list[Call]:
        return self._rows(_calls, what)

    def effects(self) -> list[Call]:
        return self._rows(_effects, None)

    def close(self) -> None:
        self.engine.dispose()


def ledger_url_for(journal_url: str) -> str:
    """Where the ledger of a journal lives: its own SQLite file (no contention with the journal's
    write lock), or the journal's own PostgreSQL database."""
    if journal_url.startswith("memory:"):
        return "memory://"
    if journal_url.startswith("sqlite:///"):
        return journal_url + ".ledger.db"
    return journal_url


def open_ledger(journal_url: str, scope: str | None = None) -> Ledger:
    """The ledger for tests on ``journal_url``; pass the same ``scope`` in every process that shares it."""
    url = ledger_url_for(journal_url)
    if url == "memory://":
        return MemoryLedger(scope or "")
    return SqlLedger(url, scope or uuid.uuid4().hex[:12])


# -- the sample order, with hooks that write to a ledger -----------------------------------------------

Hook = Callable[[str, Any, Any, CallOptions], None]


def order_script() -> list[ToolCall]:
    """charge, reserve, notify: three side effects, one decision each."""
    return [
        ToolCall("charge", {"amount": 10, "currency": "EUR"}),
        ToolCall("reserve", {"sku": "A1", "qty": 2}),
        ToolCall("notify", {"to": "c@example.com"}),
    ]


def order_tools(
    ledger: Ledger, *, before_compensate: Hook | None = None, **tool_options: Any
) -> dict[str, Tool]:
    """Tools whose execute and compensate append to ``ledger``; ``before_compensate(name, input, output,
    opts)`` runs first in every compensate hook (to fail, pause or die there). ``tool_options`` go to
    every ``Tool`` (``compensate_timeout=``, ``compensate_retry=``)."""

    def make(name: str) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            ledger.effect(opts.idempotency_key, f"execute:{name}")
            return {"id": f"{name}-{opts.tool_call_id}", "input": input}

        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            if before_compensate is not None:
                before_compensate(name, input, output, opts)
            ledger.effect(opts.idempotency_key, f"compensate:{name}")

        return Tool(execute, compensate, **tool_options)

    return {name: make(name) for name in ("charge", "reserve", "notify")}
