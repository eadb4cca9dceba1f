"""Distributed unwinds in SQL (the Celery executor's worklists and one entry per step)."""

from __future__ import annotations

import functools
import operator
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from ...errors import MalformedRecordError
from .. import driver
from ..driver import Prepared
from ..records import (
    ClaimStatus,
    CompensationClaim,
    GroupPlan,
    StepClaim,
    StepFinish,
    StepView,
    UnwindEnd,
    UnwindInfo,
    UnwindState,
)
from ..schema import claims, records, redeliveries, runs, unwind_entries, unwinds
from ..tombstone import check_not_condemned_row
from .audit import audit_insert_from, audit_params
from .claims import claim_row
from .common import (
    CLAIM_PREFIX,
    MAX_ROWS,
    NOW,
    RECORD_PREFIX,
    RUN,
    PlumbingStatements,
    SqlPlumbing,
    StatementsBase,
    b,
)
from .common import dump_json as _dump
from .common import load_json as _load
from .records import record_row


class UnwindStatements(StatementsBase):
    def _build_unwinds(self) -> None:
        """Distributed unwinds: the worklist and one entry per step outcome."""
        insert = self.policy.insert
        p = self._prepare
        self.unwind_insert = p(self._unwind_if_absent())
        self.unwind_get = p(sa.select(unwinds).where(unwinds.c.unwind_id == b("unwind")))
        self.entry_insert = p(
            insert(unwind_entries)
            .values(unwind_id=b("unwind"), position=b("at"), entry=b("new_entry"), created_at=NOW)
            .on_conflict_do_nothing(index_elements=["unwind_id", "position"])
            .returning(unwind_entries.c.entry)
        )
        self.entry_get = p(
            sa.select(unwind_entries.c.entry).where(
                unwind_entries.c.unwind_id == b("unwind"), unwind_entries.c.position == b("at")
            )
        )
        self.entries_of_unwind = p(
            sa.select(unwind_entries.c.position, unwind_entries.c.entry)
            .where(unwind_entries.c.unwind_id == b("unwind"))
            .order_by(unwind_entries.c.position)
        )
        lost = redeliveries.c
        self.redelivery_count = p(
            insert(redeliveries)
            .values(task_id=b("task"), redeliveries=1, first_at=NOW, last_at=NOW)
            .on_conflict_do_update(
                index_elements=["task_id"], set_={"redeliveries": lost.redeliveries + 1, "last_at": NOW}
            )
            .returning(lost.redeliveries)
        )
        self.redeliveries_forget = p(sa.delete(redeliveries).where(lost.task_id == b("task")))
        self.unwinds_of_run = p(
            sa.select(unwinds)
            .where(unwinds.c.run_id == b("run"))
            .order_by(unwinds.c.created_at.desc(), unwinds.c.unwind_id.desc())
            .limit(MAX_ROWS)
        )

    def _unwind_if_absent(self) -> Any:
        """The unwind inserted unless one of its id is there, returning the row it inserted."""
        return (
            self.policy.insert(unwinds)
            .values(
                unwind_id=b("unwind"),
                run_id=b("run"),
                dry_run=b("plan_only", type_=sa.Boolean),
                suffixes=b("worklist"),
                created_at=NOW,
                actor=b("who"),
                reason=b("why"),
                via=b("through"),
                run_epoch=b("epoch", type_=sa.Integer),
                group_plan=b("plan"),
            )
            .on_conflict_do_nothing(index_elements=["unwind_id"])
            .returning(*unwinds.c)
        )

    def _build_unwind_held(self, hold: sa.Update) -> None:
        """The coordinator's ``record_unwind`` as one statement where the dialect allows
        (``writes_in_with_clause``): the unwind inserted if absent, the stored one returned (the
        insert's row, else the one there first), and the run's sweep held if the stored unwind is
        this run's and not a dry run (``hold``: the sweep's hold, ``SweepStatements._hold_sweep``).
        None elsewhere (``SqlUnwinds._store_unwind``)."""
        self.unwind_held: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        insert = self._unwind_if_absent().cte("ins")
        # The one there first (a redelivery): read in the statement's snapshot. One inserted by a
        # transaction still open when this began is not in it: no row then (the caller reads again).
        there = sa.select(*unwinds.c).where(
            unwinds.c.unwind_id == b("unwind"), ~sa.exists(sa.select(insert.c.unwind_id))
        )
        stored = sa.union_all(sa.select(*insert.c), there).cte("stored")
        mine = sa.select(stored.c.unwind_id).where(
            stored.c.run_id == runs.c.run_id, stored.c.dry_run.is_(False)
        )
        held = hold.where(RUN, sa.exists(mine)).returning(runs.c.run_id).cte("held")
        self.unwind_held = self._prepare(sa.select(*stored.c).add_cte(held))

    def _build_step_view(self) -> None:
        """All a step task reads, in one statement."""
        p = self._prepare
        # An unwind's two latest entries. Steps run in order, so a step's own entry and the one
        # before it are almost always among them (see SqlJournal.read_step).
        latest = (
            sa.select(unwind_entries.c.unwind_id, unwind_entries.c.position, unwind_entries.c.entry)
            .where(unwind_entries.c.unwind_id == b("unwind"))
            .order_by(unwind_entries.c.position.desc())
            .limit(2)
            .subquery("latest")
        )
        # All a step task reads, in one round trip: the unwind with its two latest entries
        # (a row each), each row with the step's tool record (columns prefixed ``record_``) and its
        # claim (prefixed ``claim_``), both by primary key; no unwind, no rows.
        step_record = records.outerjoin(
            claims,
            sa.and_(claims.c.origin_run_id == records.c.origin_run_id, claims.c.suffix == records.c.suffix),
        )
        self.step_view = p(
            sa.select(
                unwinds,
                latest.c.position.label("entry_position"),
                latest.c.entry,
                *[c.label(RECORD_PREFIX + c.name) for c in records.c],
                *[c.label(CLAIM_PREFIX + c.name) for c in claims.c],
            )
            .select_from(
                unwinds.outerjoin(latest, latest.c.unwind_id == unwinds.c.unwind_id).outerjoin(
                    step_record,
                    sa.and_(records.c.run_id == b("run"), records.c.suffix == b("step_suffix")),
                )
            )
            .where(unwinds.c.unwind_id == b("unwind"))
        )

    def _build_step_finish(self) -> None:
        """A step's outcome and its unwind entry in one statement, where the dialect allows it.

        The claim's compare-and-set and the entry's insert-if-absent, the entry chosen by whether the
        update matched (``won_entry`` or ``lost_entry``), committed together in one round trip; the
        row says whether the outcome was ``written`` and gives the ``entry`` inserted, NULL when an
        entry was there first (read it then: a sibling sub-statement's snapshot may not show it)."""
        self.step_finish: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        written, inserted = self._step_finish_ctes()
        self.step_finish = self._prepare(
            sa.select(written.label("written"), sa.select(inserted.c.entry).scalar_subquery().label("entry"))
        )

    def _step_finish_ctes(self) -> tuple[sa.Exists, sa.CTE]:
        """``step_finish``'s compare-and-set (as whether it matched) and its entry's insert."""
        insert = self.policy.insert
        mine = (
            claims.c.origin_run_id == b("origin"),
            claims.c.suffix == b("step_suffix"),
            claims.c.owner == b("holder"),
            claims.c.status == ClaimStatus.CLAIMED.value,
        )
        finished = (
            sa.update(claims)
            .where(*mine)
            .values(status=b("new_status"), error=b("new_error"), finished_at=self.policy.clock())
            .returning(claims.c.owner)
            .cte("finished")
        )
        written = sa.exists(sa.select(finished.c.owner))
        chosen = sa.case((written, b("won_entry", type_=sa.Text)), else_=b("lost_entry", type_=sa.Text))
        inserted = (
            insert(unwind_entries)
            .from_select(
                ["unwind_id", "position", "entry", "created_at"],
                sa.select(b("unwind", type_=sa.String), b("at", type_=sa.Integer), chosen, NOW),
            )
            .on_conflict_do_nothing(index_elements=["unwind_id", "position"])
            .returning(unwind_entries.c.entry)
            .cte("inserted")
        )
        return written, inserted

    def _build_step_finish_ended(self, unwind_state: Callable[..., sa.Update]) -> None:
        """``step_finish`` that also ends the unwind (``Journal.finish_step``'s ``end``): the run's
        unwind state (``unwind_state``: ``SweepStatements._unwind_state``) and the ``unwound`` audit
        row, both only if the outcome was written and the entry inserted is this statement's; one
        statement, one commit. None where the dialect cannot (one transaction instead)."""
        self.step_finish_ended: Prepared | None = None
        self.step_finish_ended_at_epoch: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        for name, at_epoch in (("step_finish_ended", False), ("step_finish_ended_at_epoch", True)):
            written, inserted = self._step_finish_ctes()
            ours = sa.and_(written, sa.exists(sa.select(inserted.c.entry)))
            state = unwind_state(at_epoch=at_epoch).where(ours).returning(runs.c.run_id)
            logged = audit_insert_from(self.policy, sa.select(b("run", type_=sa.String)).where(ours))
            statement = sa.select(
                written.label("written"), sa.select(inserted.c.entry).scalar_subquery().label("entry")
            ).add_cte(state.cte("state"), logged.cte("logged"))
            setattr(self, name, self._prepare(statement))


def unwind_row(m: Mapping[Any, Any]) -> UnwindInfo:
    suffixes = _load(m["suffixes"], m["run_id"], f"unwind {m['unwind_id']!r} worklist")
    if not isinstance(suffixes, list) or not all(isinstance(x, str) for x in suffixes):
        raise MalformedRecordError(
            m["run_id"], f"unwind {m['unwind_id']!r} worklist", "not a list of step suffixes"
        )
    return UnwindInfo(
        unwind_id=m["unwind_id"],
        run_id=m["run_id"],
        dry_run=bool(m["dry_run"]),
        suffixes=tuple(suffixes),
        created_at=m["created_at"],
        actor=m.get("actor") or "",
        reason=m.get("reason") or "",
        via=m.get("via") or "worker",
        run_epoch=m.get("run_epoch"),
        groups=_group_plan(m, len(suffixes)),
    )


def _group_plan(m: Mapping[Any, Any], steps: int) -> GroupPlan | None:
    """The stored plan of a parallel unwind; one that cannot be read fails closed, naming the unwind."""
    text = m.get("group_plan")
    if text is None:
        return None
    where = f"unwind {m['unwind_id']!r} groups"
    try:
        plan = GroupPlan.from_json(_load(text, m["run_id"], where))
    except ValueError as exc:
        raise MalformedRecordError(m["run_id"], where, str(exc)) from exc
    if sum(plan.sizes) != steps:
        raise MalformedRecordError(m["run_id"], where, "its sizes do not add up to the worklist's length")
    return plan


class UnwindReads(PlumbingStatements, Protocol):
    """The statements ``SqlUnwinds`` reads (its own and other areas')."""

    claim_finish: Prepared
    entries_of_unwind: Prepared
    entry_get: Prepared
    entry_insert: Prepared
    hold_sweep: Prepared
    hold_sweep_of_unwind: Prepared
    redeliveries_forget: Prepared
    redelivery_count: Prepared
    step_finish: Prepared | None
    step_finish_ended: Prepared | None
    step_finish_ended_at_epoch: Prepared | None
    audit_insert_unread: Prepared
    unwind_state: Prepared
    unwind_state_at_epoch: Prepared
    step_view: Prepared
    step_view_claimed: Prepared | None
    unwind_get: Prepared
    unwind_held: Prepared | None
    unwind_insert: Prepared
    unwinds_of_run: Prepared


class SqlUnwinds(SqlPlumbing):
    """``UnwindsPart`` (``journal/parts.py``): distributed unwinds, on the statements above."""

    _q: UnwindReads

    def _unwind_params(
        self,
        unwind_id: str,
        run_id: str,
        dry_run: bool,
        suffixes: Sequence[str],
        actor: str,
        reason: str,
        via: str,
        run_epoch: int | None,
        groups: GroupPlan | None = None,
    ) -> dict[str, Any]:
        return {
            "plan": None if groups is None else _dump(groups.as_json()),
            "epoch": run_epoch,
            "unwind": unwind_id,
            "run": run_id,
            "plan_only": bool(dry_run),
            "worklist": _dump(list(suffixes)),
            "who": actor,
            "why": reason,
            "through": via,
            "now": time.time(),
        }

    def insert_unwind(
        self,
        unwind_id: str,
        run_id: str,
        *,
        dry_run: bool,
        suffixes: Sequence[str],
        actor: str = "",
        reason: str = "",
        via: str = "worker",
        run_epoch: int | None = None,
        groups: GroupPlan | None = None,
    ) -> UnwindInfo:
        params = self._unwind_params(
            unwind_id, run_id, dry_run, suffixes, actor, reason, via, run_epoch, groups
        )
        return self._store_unwind(params, None)

    def record_unwind(
        self,
        unwind_id: str,
        run_id: str,
        *,
        dry_run: bool,
        suffixes: Sequence[str],
        actor: str = "",
        reason: str = "",
        via: str = "worker",
        run_epoch: int | None = None,
        hold_grace: float | None = None,
        hold_note: str = "",
        groups: GroupPlan | None = None,
    ) -> UnwindInfo:
        params = self._unwind_params(
            unwind_id, run_id, dry_run, suffixes, actor, reason, via, run_epoch, groups
        )
        hold = (
            None
            if hold_grace is None
            else {
                "run": run_id,
                "grace": float(hold_grace),
                "note": storable_or_none(hold_note),
                "now": time.time(),
            }
        )
        return self._store_unwind(params, hold)

    def _store_unwind(self, params: dict[str, Any], hold: dict[str, Any] | None) -> UnwindInfo:
        """Insert the unwind if absent and read the stored one; with ``hold``, hold the sweep in the same
        transaction if the stored unwind is this run's and not a dry run (one commit, not two). Where a
        round trip costs (PostgreSQL), the three statements go in one pipeline, one implicit transaction."""
        q = self._q
        alone = f"the unwind {params['unwind']!r} of run {params['run']!r}"
        if hold is not None and q.unwind_held is not None:
            # One statement: the insert, the stored unwind, the hold (one commit, one round trip).
            one, both = q.unwind_held, {**params, **hold}
            held = self._write(lambda tx: tx.one(one, both), alone=alone)
            if held is not None:
                return unwind_row(held)
            # Inserted by another transaction this statement's snapshot did not see: as below.
        if hold is not None and self.policy.transactions_cost_round_trips:
            both = {**params, **hold}
            _, got, _ = self._write(
                lambda tx: tx.batch(
                    [(q.unwind_insert, both), (q.unwind_get, both), (q.hold_sweep_of_unwind, both)]
                ),
                alone=alone,
            )
            return unwind_row(got[0])

        def work(tx: driver.Tx) -> driver.Row | None:
            stored = tx.one(q.unwind_insert, params) or tx.one(q.unwind_get, params)
            if (
                hold is not None
                and stored is not None
                and stored["run_id"] == params["run"]
                and not stored["dry_run"]
            ):
                tx.execute(q.hold_sweep, hold)
            return stored

        row = self._write(work, atomic=hold is not None, alone=alone)
        assert row is not None
        return unwind_row(row)

    def get_unwind(self, unwind_id: str) -> UnwindInfo | None:
        row = self._fetch(lambda tx: tx.one(self._q.unwind_get, {"unwind": unwind_id}))
        return None if row is None else unwind_row(row)

    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]:
        rows = self._fetch(lambda tx: tx.all(self._q.unwinds_of_run, {"run": run_id, "max_rows": int(limit)}))
        return [unwind_row(r) for r in rows]

    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]:
        q = self._q
        params = {"unwind": unwind_id, "at": position, "new_entry": _dump(entry), "now": time.time()}
        row = self._write(
            lambda tx: tx.one(q.entry_insert, params) or tx.one(q.entry_get, params),
            alone=f"entry {position} of the unwind {unwind_id!r}",
        )
        assert row is not None
        return _load(row["entry"], unwind_id, f"unwind entry {position}")  # type: ignore[no-any-return]

    def count_redelivery(self, task_id: str) -> int:
        params = {"task": task_id, "now": time.time()}
        row = self._write(
            lambda tx: tx.one(self._q.redelivery_count, params),
            durable=True,
            alone=f"the delivery count of unwind task {task_id!r}",
        )
        assert row is not None
        return int(row["redeliveries"])

    def forget_redeliveries(self, task_id: str) -> None:
        self._write(
            lambda tx: tx.execute(self._q.redeliveries_forget, {"task": task_id}),
            alone=f"the delivery count of unwind task {task_id!r}",
        )

    def finish_step(
        self,
        origin_run_id: str,
        suffix: str,
        owner: str,
        status: ClaimStatus,
        error: str | None = None,
        *,
        unwind_id: str,
        position: int,
        won: dict[str, Any],
        lost: dict[str, Any],
        end: UnwindEnd | None = None,
    ) -> StepFinish:
        q = self._q
        won_text = _dump(won)
        params: dict[str, Any] = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "new_status": status.value,
            "new_error": storable_or_none(error),
            "unwind": unwind_id,
            "at": position,
            "won_entry": won_text,
            "lost_entry": won_text if lost is won else _dump(lost),
            "now": time.time(),
        }
        one_statement = q.step_finish
        if end is not None:  # the unwind's end too: its state and its audit row (``UnwindEnd``)
            audit = end.audit
            check_not_condemned_row(audit)
            params.update(
                audit_params(audit),
                run=audit.run_id,
                state=UnwindState.COMPLETE.value,
                note=None,
                next_at=None,
                bump=0,
                epoch=end.epoch,
            )
            one_statement = q.step_finish_ended if end.epoch is None else q.step_finish_ended_at_epoch

        def work(tx: driver.Tx) -> tuple[bool, str, bool]:
            ours = False  # the entry inserted is this call's
            if one_statement is not None:  # one round trip, committed alone (autocommit)
                row = tx.one(one_statement, params)
                assert row is not None
                written, entry = bool(row["written"]), row["entry"]
                ours = entry is not None
            else:
                written = tx.changed(q.claim_finish, params) > 0
                new = {**params, "new_entry": params["won_entry" if written else "lost_entry"]}
                stored = tx.one(q.entry_insert, new)
                entry = None if stored is None else stored["entry"]
                ours = entry is not None
                if end is not None and written and ours:  # in this transaction
                    tx.execute(q.audit_insert_unread, params)
                    tx.execute(q.unwind_state if end.epoch is None else q.unwind_state_at_epoch, params)
            if entry is None:  # an entry was there first: it stands
                stored = tx.one(q.entry_get, params)
                assert stored is not None
                entry = stored["entry"]
            return written, entry, end is not None and written and ours

        alone = f"the outcome of the compensation of step {suffix!r} of run {origin_run_id!r}"
        written, text, ended = self._write(work, atomic=one_statement is None, alone=alone)
        # The entry stored is most often the one this call sent: its text is then ``won``'s, which
        # reads back as ``won`` (canonical JSON of JSON values), so it is not parsed again.
        entry = dict(won) if text == won_text else _load(text, unwind_id, f"unwind entry {position}")
        return StepFinish(written, entry, ended)

    def read_step(self, unwind_id: str, run_id: str, suffix: str, claim: StepClaim | None = None) -> StepView:
        q = self._q
        params: dict[str, Any] = {"unwind": unwind_id, "run": run_id, "step_suffix": suffix}
        folded = None if claim is None or not claim.tools else q.step_view_claimed
        statement = q.step_view if folded is None else folded
        if folded is not None and claim is not None:
            params.update(
                _fixed_claim_params(claim.tools, claim.goes_on, claim.halts),
                holder=claim.owner,
                via=claim.via_run_id,
                ttl=float(claim.ttl),
                now=time.time(),
                **self.policy.lease_clock(),
            )

        def work(
            tx: driver.Tx,
        ) -> tuple[UnwindInfo | None, int | None, Any, Any, driver.Row | None, driver.Row | None, Any]:
            # One statement: the unwind, its two latest entries, the step's record and claim (and,
            # with ``claim``, the claim taken, in the same statement and commit).
            rows = tx.all(statement, params)
            unwind = unwind_row(rows[0]) if rows else None
            at = unwind.suffixes.index(suffix) if unwind and suffix in unwind.suffixes else None
            entry, before = _step_entries(tx, q, unwind_id, at, rows)
            taken = _taken(rows[0]) if rows and folded is not None else None
            if not rows or rows[0][RECORD_PREFIX + "run_id"] is None:
                return unwind, at, entry, before, None, None, taken
            return unwind, at, entry, before, _columns(rows[0], _RECORD), _columns(rows[0], _CLAIM), taken

        unwind, at, entry_text, previous_text, record, claim_columns, taken = (
            self._write(work, alone=f"the claim of step {suffix!r} of run {run_id!r}")
            if folded is not None
            else self._fetch(work)
        )
        entry = None if entry_text is None else _load(entry_text, unwind_id, f"unwind entry {at}")
        previous = (
            None
            if previous_text is None or at is None
            else _load(previous_text, unwind_id, f"unwind entry {at - 1}")
        )
        if record is None or claim_columns is None:
            return StepView(unwind, at, entry, None, None, previous, taken)
        has_claim = claim_columns["origin_run_id"] is not None
        return StepView(
            unwind,
            at,
            entry,
            record_row(record),
            claim_row(claim_columns) if has_claim else None,
            previous,
            taken,
        )

    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]:
        rows = self._fetch(lambda tx: tx.all(self._q.entries_of_unwind, {"unwind": unwind_id}))
        return entries_by_position(rows, unwind_id)


class _Prefixed:
    """One table's columns in a step's read: picked out of the row by their prefixed names, in C."""

    __slots__ = ("names", "pick")

    def __init__(self, prefix: str, table: sa.Table) -> None:
        self.names = tuple(c.name for c in table.c)
        self.pick = operator.itemgetter(*(prefix + name for name in self.names))


_RECORD = _Prefixed(RECORD_PREFIX, records)
_CLAIM = _Prefixed(CLAIM_PREFIX, claims)


def _columns(row: driver.Row, table: _Prefixed) -> dict[str, Any]:
    """``table``'s columns of a step's read, by their own names."""
    return dict(zip(table.names, table.pick(row), strict=True))


@functools.lru_cache(maxsize=8)
def _fixed_claim_params(
    tools: frozenset[str], goes_on: frozenset[str], halts: frozenset[str]
) -> dict[str, Any]:
    """The parameters of a step's folded claim that stay the same from step to step (worked out once)."""
    return {"tools": sorted(tools), "entry_goes_on": _status_is(goes_on), "entry_halts": _status_is(halts)}


def _status_is(statuses: frozenset[str]) -> str:
    """A pattern of an entry's status among ``statuses``, in the journal's own JSON text
    (``canonical_json``: no spaces; a quote inside a value is escaped, so never matches)."""
    return '"status":"(' + "|".join(sorted(re.escape(s) for s in statuses)) + ')"'


def _taken(row: driver.Row) -> CompensationClaim | None:
    """The claim a step's read took (``step_view_claimed``), if it took one."""
    if row["origin_run_id"] is None:
        return None
    return claim_row(row)


def entries_by_position(rows: list[driver.Row], unwind_id: str) -> dict[int, dict[str, Any]]:
    """An unwind's stored entry rows, parsed, by position."""
    return {int(r["position"]): _load(r["entry"], unwind_id, f"unwind entry {r['position']}") for r in rows}


def _step_entries(
    tx: driver.Tx, q: UnwindReads, unwind_id: str, at: int | None, rows: list[driver.Row]
) -> tuple[str | None, str | None]:
    """The stored entry texts at ``at`` and ``at - 1``, from the unwind's two latest entries when they
    tell (every entry above the lower of the two is known to be absent), else read one by one (a stale
    redelivery of a step the chain has long passed)."""
    if at is None:
        return None, None
    latest: dict[int, str | None] = {
        int(r["entry_position"]): r["entry"] for r in rows if r["entry_position"] is not None
    }
    known_from = min(latest) if len(latest) == 2 else 0
    if max(at - 1, 0) >= known_from:
        return latest.get(at), latest.get(at - 1) if at else None
    entry = tx.one(q.entry_get, {"unwind": unwind_id, "at": at})
    before = tx.one(q.entry_get, {"unwind": unwind_id, "at": at - 1}) if at else None
    return (None if entry is None else entry["entry"]), (None if before is None else before["entry"])
