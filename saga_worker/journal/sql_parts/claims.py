"""Compensation claims (the journal's truth about who undoes a step) in SQL: statements and part."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...core import faults
from ...core.keys import compensate_key
from ...core.storable import storable_or_none
from .. import driver
from ..dialects import DialectPolicy, LeaseColumns
from ..driver import Prepared
from ..records import ClaimAttempt, ClaimStatus, CompensationClaim, FinishedClaim, RecordStatus, parse_status
from ..schema import claims, records, runs, unwind_entries, unwinds
from .audit import audit_insert_from
from .common import CLAIM_PREFIX, RECORD_PREFIX, PlumbingStatements, SqlPlumbing, StatementsBase, b

# A claim by its key; one its owner still holds; the columns of its lease (``dialects.LeaseColumns``).
KEY = (claims.c.origin_run_id == b("origin"), claims.c.suffix == b("step_suffix"))
MINE = (*KEY, claims.c.owner == b("holder"), claims.c.status == ClaimStatus.CLAIMED.value)
# The claim whose outcome ``finish_and_claim`` writes with the next step's claim (its own names: the
# next claim binds ``origin``, ``step_suffix`` and ``holder``).
FINISHED = (
    claims.c.origin_run_id == b("done_origin"),
    claims.c.suffix == b("done_suffix"),
    claims.c.owner == b("done_holder"),
    claims.c.status == ClaimStatus.CLAIMED.value,
)
# A claim's columns unqualified, for a RETURNING: the same list as ``*claims.c`` without the table's
# name before each (the statements that return them must stay short: ``either``).
CLAIM_COLUMNS: list[sa.ColumnClause[Any]] = [sa.column(c.name) for c in claims.c]
# The columns of ``either``'s rows (all of ``CLAIM_COLUMNS``, under their own names).
GOT: sa.ColumnClause[Any] = sa.literal_column("got.*")
LEASE = LeaseColumns(
    claims.c.lease_expires_at,
    claims.c.attempts,
    claims.c.lease_boot_id,
    claims.c.lease_boot_expires_at,
    claims.c.lease_boot_attempt,
)


class ClaimStatements(StatementsBase):
    def _build_claims(self) -> None:
        """Compensation claims: the journal's truth about who undoes a step."""
        self._build_claim_taking()
        p = self._prepare
        clock = self.policy.clock()
        self.claim_get = p(sa.select(claims).where(*KEY))
        self.claims_of_origin = p(sa.select(claims).where(claims.c.origin_run_id == b("origin")))
        # These two are judged by their row count (``Tx.changed``), not a RETURNING: on SQLite a
        # RETURNING collects its rows in a temporary table first, made and dropped by every statement.
        self.claim_renew = p(
            sa.update(claims).where(*MINE).values(**self.policy.lease_values(LEASE, claims.c.attempts))
        )
        self.claim_finish = p(
            sa.update(claims)
            .where(*MINE)
            .values(status=b("new_status"), error=b("new_error"), finished_at=clock)
        )

    def _takeable(self) -> sa.ColumnElement[bool]:
        """A claim another attempt may take: failed, or claimed with its lease run out. The same
        owner may take its own claim back: a redelivered task re-drives its dead attempt."""
        return sa.or_(
            claims.c.status == ClaimStatus.FAILED.value,
            sa.and_(
                claims.c.status == ClaimStatus.CLAIMED.value,
                sa.or_(self.policy.lease_expired(LEASE), claims.c.owner == b("holder")),
            ),
        )

    def _first_claim_values(self) -> dict[str, Any]:
        clock = self.policy.clock()
        return {
            "origin_run_id": b("origin"),
            "suffix": b("step_suffix"),
            "status": ClaimStatus.CLAIMED.value,
            "owner": b("holder"),
            "attempts": 1,
            "idempotency_key": b("key"),
            "via_run_id": b("via"),
            "started_at": clock,
            **self.policy.lease_values(LEASE, 1),
        }

    def _taking_values(self) -> dict[str, Any]:
        return {
            "status": ClaimStatus.CLAIMED.value,
            "owner": b("holder"),
            "attempts": claims.c.attempts + 1,
            "via_run_id": b("via"),
            "error": None,
            "started_at": self.policy.clock(),
            "finished_at": None,
            **self.policy.lease_values(LEASE, claims.c.attempts + 1),
        }

    def _build_claim_taking(self) -> None:
        """A claim's first attempt (insert-if-absent), and a later one (take a failed claim, or one
        whose lease ran out); and both after the previous step's outcome, in one statement where
        the dialect allows it (``claim_next``)."""
        p = self._prepare
        self.claim_insert = p(
            self.policy.insert(claims)
            .values(**self._first_claim_values())
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*claims.c)
        )
        self.claim_take = p(
            sa.update(claims)
            .where(*KEY, self._takeable())
            .values(**self._taking_values())
            .returning(*claims.c)
        )
        # The two without RETURNING, judged by their row count, where a RETURNING costs more than
        # reading the row (``returning_builds_a_table``): a claim taken over is then read by its key in
        # the same transaction, a first claim made from what the insert bound (``inserted``).
        self.claim_insert_counted = p(
            self.policy.insert(claims)
            .values(**self._first_claim_values())
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
        )
        self.claim_take_counted = p(
            sa.update(claims).where(*KEY, self._takeable()).values(**self._taking_values())
        )
        # Where a claim is made after the previous step's outcome in one transaction of several
        # statements (SQLite), the claim runs in a savepoint, so that an error in it keeps the outcome.
        self.claim_savepoint = p(sa.text("SAVEPOINT next_claim"))
        self.claim_savepoint_release = p(sa.text("RELEASE SAVEPOINT next_claim"))
        self.claim_savepoint_undo = p(sa.text("ROLLBACK TO SAVEPOINT next_claim"))
        self._build_claim_next()

    def _build_claim_next(self) -> None:
        """The previous step's outcome and this step's claim in one statement (``writes_in_with_clause``):
        the outcome's compare-and-set, then, only if it matched, the claim's insert-if-absent and its
        take (a sibling sub-statement does not see the other's row: one of them acts). The row says
        whether the outcome was ``written`` and, when the claim was taken, its columns (NULL if not:
        busy, or nothing claimed because the outcome was not written). Kept under psycopg's parsing
        cache, as every statement of the unwind's path (``either``)."""
        self.claim_next: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        finished = (
            sa.update(claims)
            .where(*FINISHED)
            .values(status=b("new_status"), error=b("new_error"), finished_at=self.policy.clock())
            .returning(claims.c.owner)
            .cte("finished")
        )
        written = sa.exists(sa.select(finished.c.owner))
        first = self._first_claim_values()
        names = list(first)
        inserted = (
            self.policy.insert(claims)
            .from_select(
                names,
                sa.select(*(sa.literal(v) if isinstance(v, str | int) else v for v in first.values())).where(
                    written
                ),
            )
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*CLAIM_COLUMNS)
            .cte("inserted")
        )
        taken = (
            sa.update(claims)
            .where(*KEY, self._takeable(), written)
            .values(**self._taking_values())
            .returning(*CLAIM_COLUMNS)
            .cte("taken")
        )
        one = sa.select(sa.literal(1).label("one")).subquery("one")
        self.claim_next = self._prepare(
            sa.select(written.label("written"), GOT).select_from(
                one.outerjoin(either(inserted, taken), sa.true())
            )
        )

    def _build_condemn_claimed(self, stamp: sa.Update) -> None:
        """The tombstone (``stamp``, a run's row stamped if it has none yet), its audit row and the
        first step's claim in one statement (``writes_in_with_clause``; None elsewhere: one
        transaction instead, ``SqlTombstone.condemn_read_and_claim``).

        The step claimed is ``FirstClaim.target``'s, judged in SQL: the run's latest record among
        ``unwound``, if it succeeded and its tool is one of ``tools``, and only if the stamp wrote
        the tombstone and every record of the run has a status this code knows (one it does not
        fails the unwind when the rows are parsed, and no claim may be left behind by it). The claim
        is the insert-if-absent and the take of ``claim_next``: one of them acts, or neither (busy,
        already compensated), and the tombstone is written either way. The row: the stamp's
        ``condemned_at`` and the claim's columns (NULL when none was taken); no row when the stamp
        wrote nothing. Kept under psycopg's parsing cache (``either``; the records as ``r``)."""
        self.condemn_stamp_claimed: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        written = stamp.returning(runs.c.run_id, runs.c.condemned_at).cte("tombstone_stamp")
        logged = audit_insert_from(self.policy, sa.select(written.c.run_id)).cte("logged")
        r = records.alias("r")
        of_run = r.c.run_id == b("run")
        latest = (
            sa.select(r.c.origin_run_id, r.c.suffix, r.c.status, r.c.tool_name)
            .where(of_run, r.c.status == sa.any_(sa.bindparam("unwound", type_=sa.ARRAY(sa.String))))
            .order_by(r.c.seq.desc())
            .limit(1)
            .cte("latest")
        )
        unknown = sa.exists(sa.select(r.c.seq).where(of_run, *(r.c.status != v.value for v in RecordStatus)))
        target = (
            sa.select(latest.c.origin_run_id, latest.c.suffix)
            .where(
                latest.c.status == RecordStatus.SUCCEEDED.value,
                latest.c.tool_name == sa.any_(sa.bindparam("tools", type_=sa.ARRAY(sa.String))),
                sa.exists(sa.select(written.c.run_id)),
                ~unknown,
            )
            .cte("target")
        )
        inserted = self._claim_target(target, "first_inserted")
        taken = (
            sa.update(claims)
            .where(
                claims.c.origin_run_id == sa.select(target.c.origin_run_id).scalar_subquery(),
                claims.c.suffix == sa.select(target.c.suffix).scalar_subquery(),
                self._takeable(),
            )
            .values(**self._taking_values())
            .returning(*CLAIM_COLUMNS)
            .cte("first_taken")
        )
        self.condemn_stamp_claimed = self._prepare(
            sa.select(written.c.condemned_at, GOT)
            .select_from(written.outerjoin(either(inserted, taken), sa.true()))
            .add_cte(logged)
        )

    def _build_step_claimed(self) -> None:
        """A step task's read (``step_view``'s rows) and the step's claim in one statement
        (``writes_in_with_clause``; None elsewhere: the read alone, the claim as before).

        The claim is the insert-if-absent only, of a step that goes from its read straight to its
        claim (``StepClaim``), judged in SQL no less strictly than ``run_step`` and ``StepAttempt``
        judge it in Python: the unwind is the run's, not a dry run and not a parallel one (whose
        order rule is its group plan's, ``chain._check_wave_before``); the step's record is the
        run's own effect (the step lock is taken on that key before the read), succeeded, and its
        tool is one of ``tools``; the step is in the worklist (a list of plain strings: any other
        text takes no claim here) with no entry stored at its position, and the entry before it
        (none at position 0) read as one that did not halt (its status a known, non-halting one in
        the journal's own JSON text). Anything else (a claim row already there, a fork's step,
        a retry) takes no claim here: the step is claimed as before. The rows: ``step_view``'s,
        each with the claim taken (the claim's columns under their own names, NULL when none was).

        Written compactly (``_step_view_text``): psycopg caches the parsing of a statement only up
        to 4,096 characters, and parses a longer one again on every call."""
        self.step_view_claimed: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        entry_at = (
            f"SELECT e.entry FROM {unwind_entries.name} AS e WHERE e.unwind_id = :unwind AND e.position = "
        )
        target = (
            sa.text(
                f"SELECT r.origin_run_id, r.suffix FROM {records.name} AS r, {unwinds.name} AS u, "
                "LATERAL (SELECT min(w.n) - 1 AS at FROM jsonb_array_elements_text(CASE WHEN u.suffixes ~ "
                ":plain_worklist THEN CAST(u.suffixes AS jsonb) ELSE CAST('[]' AS jsonb) END) "
                "WITH ORDINALITY AS w(s, n) WHERE w.s = :step_suffix) AS pos "
                "WHERE u.unwind_id = :unwind AND u.run_id = :run AND NOT u.dry_run AND u.group_plan IS NULL "
                "AND r.run_id = :run AND r.suffix = :step_suffix AND r.origin_run_id = :run "
                f"AND r.status = '{RecordStatus.SUCCEEDED.value}' AND r.tool_name = ANY(:tools) "
                f"AND pos.at IS NOT NULL AND NOT EXISTS ({entry_at}pos.at) "
                f"AND (pos.at = 0 OR EXISTS (SELECT 1 FROM ({entry_at}pos.at - 1) AS before "
                "WHERE before.entry ~ :entry_goes_on AND before.entry !~ :entry_halts))"
            )
            .bindparams(
                sa.bindparam("tools", type_=sa.ARRAY(sa.String)),
                sa.bindparam("entry_goes_on", type_=sa.Text),
                sa.bindparam("entry_halts", type_=sa.Text),
                # a JSON list of strings without a quote or backslash in any: text the cast always reads
                sa.bindparam("plain_worklist", value=r'^\[("[^"\\]*"(,"[^"\\]*")*)?\]$', type_=sa.Text),
            )
            .columns(origin_run_id=sa.String, suffix=sa.String)
            .cte("step_target")
        )
        taken = self._claim_target(target, "step_taken")
        read = sa.text(f"({self._step_view_text()}) AS step_read LEFT OUTER JOIN step_taken ON true")
        self.step_view_claimed = self._prepare(
            sa.select(sa.literal_column("step_read.*"), sa.literal_column("step_taken.*"))
            .select_from(read)
            .add_cte(taken)
        )

    def _claim_target(self, target: Any, name: str) -> Any:
        """A CTE named ``name``: the claim of the step ``target`` (a CTE with ``origin_run_id`` and
        ``suffix``) inserted if absent, as a first claim is, its columns returned."""
        values = self._first_claim_values()
        values["origin_run_id"] = target.c.origin_run_id
        values["suffix"] = target.c.suffix
        values["idempotency_key"] = sa.func.concat(target.c.origin_run_id, ":comp:", target.c.suffix)
        return (
            self.policy.insert(claims)
            .from_select(
                list(values),
                sa.select(*(sa.literal(v) if isinstance(v, str | int) else v for v in values.values())),
            )
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*CLAIM_COLUMNS)
            .cte(name)
        )

    def _step_view_text(self) -> str:
        """``step_view``'s SELECT, the same columns under the same names, in short aliases. Every
        column named, none as a table's ``*``: psycopg prepares the statement on the server, and a
        prepared ``*`` fails once a migration adds a column (``test_prepared_after_expand.py``)."""
        quote = self.dialect.identifier_preparer.quote
        columns = ", ".join(
            [
                *(f"u.{quote(c.name)}" for c in unwinds.c),
                "l.position AS entry_position",
                "l.entry",
                *(f"r.{quote(c.name)} AS {RECORD_PREFIX}{c.name}" for c in records.c),
                *(f"c.{quote(c.name)} AS {CLAIM_PREFIX}{c.name}" for c in claims.c),
            ]
        )
        return (
            f"SELECT {columns} FROM {unwinds.name} AS u LEFT OUTER JOIN (SELECT e.unwind_id, e.position, "
            f"e.entry FROM {unwind_entries.name} AS e WHERE e.unwind_id = :unwind ORDER BY e.position DESC "
            f"LIMIT 2) AS l ON l.unwind_id = u.unwind_id LEFT OUTER JOIN ({records.name} AS r LEFT OUTER "
            f"JOIN {claims.name} AS c ON c.origin_run_id = r.origin_run_id AND c.suffix = r.suffix) ON "
            "r.run_id = :run AND r.suffix = :step_suffix WHERE u.unwind_id = :unwind"
        )


def either(inserted: sa.CTE, taken: sa.CTE) -> sa.Subquery:
    """The claim an insert-if-absent or a take returned (the rows of both, of which one at most has
    one), as ``got``: its columns are their RETURNING's, ``CLAIM_COLUMNS``, read as ``GOT``.

    Written with ``*`` over the two CTEs, not their columns named again: psycopg caches its parsing
    of a statement only up to 4,096 characters (``tests/journal/test_statement_lengths.py``)."""
    return sa.union_all(*(sa.select(sa.text("*")).select_from(cte) for cte in (inserted, taken))).subquery(
        "got"
    )


# A claim's columns in the order of ``CompensationClaim``'s fields (``claim_of``).
CLAIM_FIELDS = (
    "origin_run_id",
    "suffix",
    "status",
    "owner",
    "lease_expires_at",
    "attempts",
    "idempotency_key",
    "via_run_id",
    "error",
    "started_at",
    "finished_at",
    "lease_boot_id",
    "lease_boot_expires_at",
    "lease_boot_attempt",
)


def claim_of(values: Sequence[Any]) -> CompensationClaim:
    """``claim_row`` of a row read as ``CLAIM_FIELDS``' values (``Tx.picked``): no dict made for it."""
    origin, suffix, status = values[0], values[1], values[2]
    return CompensationClaim(
        origin,
        suffix,
        parse_status(ClaimStatus, status, origin, f"compensation {suffix!r}"),
        *values[3:],
    )


def claim_row(m: Mapping[Any, Any]) -> CompensationClaim:
    return CompensationClaim(
        origin_run_id=m["origin_run_id"],
        suffix=m["suffix"],
        status=parse_status(ClaimStatus, m["status"], m["origin_run_id"], f"compensation {m['suffix']!r}"),
        owner=m["owner"],
        lease_expires_at=m["lease_expires_at"],
        attempts=m["attempts"],
        idempotency_key=m["idempotency_key"],
        via_run_id=m["via_run_id"],
        error=m["error"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        lease_boot_id=m.get("lease_boot_id"),
        lease_boot_expires_at=m.get("lease_boot_expires_at"),
        lease_boot_attempt=m.get("lease_boot_attempt"),
    )


class ClaimTaking(Protocol):
    """The statements ``taken`` runs."""

    claim_get: Prepared
    claim_insert: Prepared
    claim_take: Prepared
    claim_insert_counted: Prepared
    claim_take_counted: Prepared


def taken(
    tx: driver.Tx, q: ClaimTaking, policy: DialectPolicy, params: Mapping[str, Any]
) -> CompensationClaim | None:
    """The step's claim if this transaction took it (inserted if absent, or taken over), else None
    (nothing written). Where a RETURNING costs a temporary table (``returning_builds_a_table``), the
    writes are judged by their row counts instead: a first claim is made from what its insert bound
    (``inserted``), a claim taken over is read back by its key."""
    if not policy.returning_builds_a_table:
        row = tx.one(q.claim_insert, params) or tx.one(q.claim_take, params)
        return None if row is None else claim_row(row)
    if tx.changed(q.claim_insert_counted, params):
        first = inserted(policy, params)
        if first is not None:
            return first
    elif not tx.changed(q.claim_take_counted, params):
        return None
    values = tx.picked(q.claim_get, params, CLAIM_FIELDS)
    return None if values is None else claim_of(values)


def inserted(policy: DialectPolicy, params: Mapping[str, Any]) -> CompensationClaim | None:
    """The claim ``claim_insert_counted`` has just written with ``params``, as reading it back would
    give it: a new row (the insert wrote, so there was none), every value of it bound or computed
    from bound values (``_first_claim_values``), the lease as the policy computes it
    (``lease_written``); None where the lease is on the server's clock (read it back).

    Why: that read was a statement per step (a claim is what every step takes); the test that a
    claim so made equals the row read back keeps this in step with the statement."""
    lease = policy.lease_written(params, 1)
    if lease is None:
        return None
    expires_at, boot_id, boot_expires_at, boot_attempt = lease
    return CompensationClaim(
        params["origin"],
        params["step_suffix"],
        ClaimStatus.CLAIMED,
        params["holder"],
        expires_at,
        1,
        params["key"],
        params["via"],
        None,
        params["now"],
        None,
        boot_id,
        boot_expires_at,
        boot_attempt,
    )


class ClaimAfter(ClaimTaking, Protocol):
    """The statements ``claim_after`` runs."""

    claim_savepoint: Prepared
    claim_savepoint_release: Prepared
    claim_savepoint_undo: Prepared


def claim_after(
    tx: driver.Tx,
    q: ClaimAfter,
    policy: DialectPolicy,
    params: Mapping[str, Any],
    errors: type[Exception] | tuple[type[Exception], ...],
) -> ClaimAttempt | None:
    """A step's claim after other writes of the same transaction (the previous step's outcome, the
    tombstone): an error in it (one of ``errors``) undoes the claim alone and the writes before it
    stay (None: the caller claims the step on its own).

    Where a failed statement is undone alone (``statements_fail_alone``: SQLite), no savepoint is
    set: of the claim's statements only one writes, and a failure of the transaction as a whole (a
    full disk) is raised, as the savepoint's undo would raise it. There a claim taken over is read
    back by the statement after it (``taken``; a first claim is not: ``inserted``); should that read
    alone fail, the claim stays written, no hook called under it, and the caller's own claim (the same
    owner, the same key) takes it back.
    Elsewhere the claim runs in a savepoint. The busy case writes nothing and reads the holder's
    claim."""
    apart = not policy.statements_fail_alone
    if apart:
        tx.execute(q.claim_savepoint, {})
    try:
        claim = taken(tx, q, policy, params)
        if claim is None:
            current = tx.one(q.claim_get, params)
            got: ClaimAttempt | None = ClaimAttempt(False, None if current is None else claim_row(current))
        else:
            got = ClaimAttempt(True, claim)
    except errors:
        if apart:
            tx.execute(q.claim_savepoint_undo, {})
        elif not tx.connection.in_transaction:
            raise  # the database rolled the whole transaction back: nothing before it stays either
        got = None
    if apart:
        tx.execute(q.claim_savepoint_release, {})
    return got


class ClaimReads(PlumbingStatements, Protocol):
    """The statements ``SqlClaims`` reads (its own and other areas')."""

    claim_finish: Prepared
    claim_get: Prepared
    claim_insert: Prepared
    claim_insert_counted: Prepared
    claim_take_counted: Prepared
    claim_next: Prepared | None
    condemn_stamp_claimed: Prepared | None
    step_view_claimed: Prepared | None
    claim_renew: Prepared
    claim_savepoint: Prepared
    claim_savepoint_release: Prepared
    claim_savepoint_undo: Prepared
    claim_take: Prepared
    claims_of_origin: Prepared


class SqlClaims(SqlPlumbing):
    """``ClaimsPart`` (``journal/parts.py``) on the statements above."""

    _q: ClaimReads

    def get_claim(self, origin_run_id: str, suffix: str) -> CompensationClaim | None:
        row = self._fetch(
            lambda tx: tx.one(self._q.claim_get, {"origin": origin_run_id, "step_suffix": suffix})
        )
        return None if row is None else claim_row(row)

    def get_claims(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationClaim]:
        wanted = set(origin_and_suffixes)
        origins = sorted({o for o, _ in wanted})

        def work(tx: driver.Tx) -> list[driver.Row]:
            # One indexed read per origin run (a run's own, plus one per fork it shares effects with).
            return [row for o in origins for row in tx.all(self._q.claims_of_origin, {"origin": o})]

        rows = self._fetch(work) if wanted else []
        found = [c for c in map(claim_row, rows) if (c.origin_run_id, c.suffix) in wanted]  # all parsed
        return {(c.origin_run_id, c.suffix): c for c in found}

    def claim_compensation(
        self,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt:
        q = self._q
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "key": idempotency_key,
            "via": via_run_id,
            "now": time.time(),
            **self.policy.lease_clock(),
        }

        def work(tx: driver.Tx) -> ClaimAttempt:
            claim = taken(tx, q, self.policy, params)
            if claim is not None:
                return ClaimAttempt(True, claim)
            current = tx.one(q.claim_get, params)
            return ClaimAttempt(False, None if current is None else claim_row(current))

        return self._write(
            work, alone=f"the compensation claim of step {suffix!r} of run {origin_run_id!r}", grouped=True
        )

    def finish_and_claim(
        self,
        finished: FinishedClaim,
        origin_run_id: str,
        suffix: str,
        *,
        via_run_id: str,
        owner: str,
        ttl: float,
        idempotency_key: str,
    ) -> ClaimAttempt | None:
        q = self._q
        now = time.time()
        claim = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "key": idempotency_key,
            "via": via_run_id,
            "now": now,
            **self.policy.lease_clock(),
        }
        outcome = {
            "origin": finished.origin_run_id,
            "step_suffix": finished.suffix,
            "holder": finished.owner,
            "new_status": finished.status._value_,  # (``.value`` is a descriptor: two calls)
            "new_error": storable_or_none(finished.error),
            "now": now,
        }
        done_key = compensate_key(finished.origin_run_id, finished.suffix)
        merged = q.claim_next
        if merged is not None:  # one statement, one round trip, one commit
            both = {
                **claim,
                "done_origin": outcome["origin"],
                "done_suffix": outcome["step_suffix"],
                "done_holder": outcome["holder"],
                "new_status": outcome["new_status"],
                "new_error": outcome["new_error"],
            }

            def one(tx: driver.Tx) -> tuple[bool, driver.Row | None]:
                faults.point("before_next_claim", done_key)  # nothing of the statement sent yet
                row = tx.one(merged, both)
                assert row is not None  # the statement always returns its one row
                written = bool(row.pop("written"))
                return written, (row if row["origin_run_id"] is not None else None)

            written, claimed = self._write(
                one, alone=f"the compensation claim of step {suffix!r} of run {origin_run_id!r}", grouped=True
            )
            if not written:
                return None
            if claimed is not None:
                return ClaimAttempt(True, claim_row(claimed))
            return ClaimAttempt(False, self.get_claim(origin_run_id, suffix))  # busy: who holds it

        def work(tx: driver.Tx) -> tuple[bool, ClaimAttempt | None]:
            if not tx.changed(q.claim_finish, outcome):
                return False, None
            faults.point("before_next_claim", done_key)  # the outcome written, not yet committed
            # An error in the claim undoes the claim alone: the outcome stays; the claim is tried alone.
            return True, claim_after(tx, q, self.policy, claim, self.engine.dialect.loaded_dbapi.Error)

        written, got = self._write(
            work,
            atomic=True,
            alone=f"the compensation claim of step {suffix!r} of run {origin_run_id!r}",
            grouped=True,
        )
        if not written:
            return None
        if got is None:
            got = self.claim_compensation(
                origin_run_id,
                suffix,
                via_run_id=via_run_id,
                owner=owner,
                ttl=ttl,
                idempotency_key=idempotency_key,
            )
        return got

    def lease_left(self, claim: CompensationClaim) -> float:
        return self.policy.lease_left(claim, self.now)

    def renew_claim(self, origin_run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "now": time.time(),
            **self.policy.lease_clock(),
        }
        claim = f"the lease of the compensation of step {suffix!r} of run {origin_run_id!r}"
        return self._write(lambda tx: tx.changed(self._q.claim_renew, params), alone=claim) > 0

    def finish_claim(
        self, origin_run_id: str, suffix: str, owner: str, status: ClaimStatus, error: str | None = None
    ) -> bool:
        params = {
            "origin": origin_run_id,
            "step_suffix": suffix,
            "holder": owner,
            "new_status": status.value,
            "new_error": storable_or_none(error),
            "now": time.time(),
        }
        claim = f"the outcome of the compensation of step {suffix!r} of run {origin_run_id!r}"
        return self._write(lambda tx: tx.changed(self._q.claim_finish, params), alone=claim) > 0
