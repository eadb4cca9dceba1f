"""Cross-run shared executions in SQL (one execution for identical calls of several runs in a window)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from .. import driver
from ..driver import Prepared
from ..records import SharedAction, SharedStatus, parse_status
from ..schema import shared
from .common import NOW, SqlPlumbing, StatementsBase, b
from .common import dump_json as _dump
from .common import load_json as _load
from .gate import GateReads, call_gate


class SharedStatements(StatementsBase):
    def _build_shared(self) -> None:
        """Cross-run shared executions: one execution for identical calls within a window."""
        insert = self.policy.insert
        clock = self.policy.clock()
        p = self._prepare
        one_shared = (shared.c.key == b("k"), shared.c.generation == b("gen", type_=sa.Integer))
        self.shared_latest = p(
            sa.select(shared).where(shared.c.key == b("k")).order_by(shared.c.generation.desc()).limit(1)
        )
        self.shared_get = p(sa.select(shared).where(*one_shared))
        self.shared_insert = p(
            insert(shared)
            .values(
                key=b("k"),
                generation=b("gen", type_=sa.Integer),
                tool_name=b("name"),
                input=b("call_input"),
                status=SharedStatus.RUNNING.value,
                attempts=1,
                run_id=b("run"),
                created_at=clock,
                expires_at=clock + b("window", type_=sa.Double),
                updated_at=NOW,
            )
            .on_conflict_do_nothing(index_elements=["key", "generation"])
            .returning(*shared.c)
        )
        expected_shared = (*one_shared, shared.c.status == b("expected"))
        self.shared_settle = p(
            sa.update(shared)
            .where(*expected_shared)
            .values(status=b("new_status"), output=b("new_output"), error=b("new_error"), updated_at=NOW)
            .returning(*shared.c)
        )
        self.shared_reclaim = p(
            sa.update(shared)
            .where(*expected_shared)
            .values(
                status=SharedStatus.RUNNING.value,
                attempts=shared.c.attempts + 1,
                error=None,
                updated_at=NOW,
            )
            .returning(*shared.c)
        )


def shared_row(m: Mapping[Any, Any]) -> SharedAction:
    sid = f"{m['key']}:{m['generation']}"
    return SharedAction(
        shared_id=sid,
        key=m["key"],
        generation=int(m["generation"]),
        tool_name=m["tool_name"],
        input=_load(m["input"], m["run_id"], f"shared action {sid!r} input"),
        status=parse_status(SharedStatus, m["status"], m["run_id"], f"shared action {sid!r}"),
        output=_load(m["output"], m["run_id"], f"shared action {sid!r} output"),
        error=m["error"],
        attempts=m["attempts"],
        run_id=m["run_id"],
        created_at=m["created_at"],
        expires_at=m["expires_at"],
    )


class SharedReads(GateReads, Protocol):
    """The statements ``SqlShared`` reads (its own and other areas')."""

    shared_get: Prepared
    shared_insert: Prepared
    shared_latest: Prepared
    shared_reclaim: Prepared
    shared_settle: Prepared


class SqlShared(SqlPlumbing):
    """``SharedPart`` (``journal/parts.py``) on the statements above."""

    _q: SharedReads

    def latest_shared(self, key: str) -> SharedAction | None:
        row = self._fetch(lambda tx: tx.one(self._q.shared_latest, {"k": key, "max_rows": 1}))
        return None if row is None else shared_row(row)

    def get_shared(self, shared_id: str) -> SharedAction | None:
        key, _, generation = shared_id.rpartition(":")
        if not generation.isdigit():
            return None
        row = self._fetch(lambda tx: tx.one(self._q.shared_get, {"k": key, "gen": int(generation)}))
        return None if row is None else shared_row(row)

    def insert_shared(
        self,
        key: str,
        generation: int,
        tool_name: str,
        input: Any,
        run_id: str,
        window_s: float,
        *,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        params = {
            "k": key,
            "gen": int(generation),
            "name": tool_name,
            "call_input": _dump(input),
            "run": run_id,
            "window": float(window_s),
            "now": time.time(),
        }
        if gated_run is None:
            row = self._write(lambda tx: tx.one(self._q.shared_insert, params))
            return None if row is None else shared_row(row)
        run_id_gated = gated_run

        def gated(tx: driver.Tx) -> driver.Row | None:
            call_gate(tx, self._q, run_id_gated)
            return tx.one(self._q.shared_insert, params)

        row = self._write(gated, atomic=True)
        return None if row is None else shared_row(row)

    def settle_shared(
        self,
        shared_id: str,
        expected: SharedStatus,
        status: SharedStatus,
        *,
        output: Any = None,
        error: str | None = None,
        reclaim: bool = False,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        key, _, generation = shared_id.rpartition(":")
        params = {
            "k": key,
            "gen": int(generation),
            "expected": expected.value,
            "new_status": status.value,
            "new_output": None if output is None else _dump(output),
            "new_error": storable_or_none(error),
            "now": time.time(),
        }
        stmt = self._q.shared_reclaim if reclaim else self._q.shared_settle

        def work(tx: driver.Tx) -> driver.Row | None:
            if gated_run is not None:
                call_gate(tx, self._q, gated_run)  # a re-execution is a claim: behind the run's gate
            return tx.one(stmt, params)

        row = self._write(work, atomic=gated_run is not None)
        return None if row is None else shared_row(row)
