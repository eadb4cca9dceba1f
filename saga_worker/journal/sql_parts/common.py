"""What the SQL journal's parts share: bound parameters, the statements' base, the plumbing.

Parameter names never repeat a column name (SQLAlchemy reserves those inside VALUES and SET):
``run`` a run id, ``step_suffix`` a step's suffix, ``origin`` the run whose effect a claim is about,
``unwind`` an unwind id, ``now`` this machine's clock. Leases and the tombstone read PostgreSQL's
clock instead, so that skewed worker clocks cannot shorten a lease; on SQLite (one machine) they
read ``now`` too.
"""

from __future__ import annotations

import json
import json.scanner
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa

from ...core.keys import canonical_json
from ...errors import MalformedRecordError, UnwindInTransactionError
from .. import driver, hosts
from ..dialects import DialectPolicy, policy_for
from ..driver import Prepared
from ..records import RunStatus, UnwindState
from ..schema import records_waiting_clause, runs

T = TypeVar("T")

b = sa.bindparam
CLAIM_PREFIX = "claim_"
RECORD_PREFIX = "record_"
# The unwind states the sweeper re-drives; every other known state is settled (or never asked).
UNSWEPT = frozenset({UnwindState.PENDING, UnwindState.INCOMPLETE})


# A run in one of these accepts no new call and no new decision (RunInfo.ended).
# (Written out, not as IN: an IN-list parameter cannot be prepared once.)
ENDED = sa.or_(*(runs.c.status == s.value for s in (RunStatus.FINISHED, RunStatus.FAILED)))
NOT_ENDED = sa.and_(*(runs.c.status != s.value for s in (RunStatus.FINISHED, RunStatus.FAILED)))

# Bound parameters and values more than one area shares.
NOW = b("now", type_=sa.Double)
MAX_ROWS = b("max_rows", type_=sa.Integer)
WAITING = records_waiting_clause()
RUN = runs.c.run_id == b("run")
# An audit row's values but its run and time (see SqlJournal._audit_params).
AUDIT_VALUES: dict[str, sa.BindParameter[Any]] = {
    "action": b("what", type_=sa.String),
    "actor": b("who", type_=sa.String),
    "via": b("through", type_=sa.String),
    "reason": b("why", type_=sa.String),
    "target": b("which", type_=sa.String),
    "detail": b("details", type_=sa.Text),
    "event_key": b("event", type_=sa.String),
}
NEW_RUN = {
    "run_id": b("run"),
    "status": RunStatus.RUNNING.value,
    "prompt": b("new_prompt"),
    "text": "",
    "created_at": NOW,
    "updated_at": NOW,
}


def server_clock(dialect_name: str) -> sa.ColumnElement[float]:
    """The clock leases are judged by: PostgreSQL's own, or the bound ``now`` on SQLite."""
    return policy_for(dialect_name).clock()


class Conflict(Exception):
    """Raised inside a transaction to roll it back when an insert-if-absent lost its race."""


def dump_json(value: Any) -> str:
    return canonical_json(value)


# ``json.loads``'s own scanner, called straight: around it ``loads`` makes five Python calls (its
# checks for whitespace before and after the value), and the texts the journal writes have neither
# (``canonical_json``). Anything else the scanner does not read to its end goes to ``loads``.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # (typeshed: any context)


def load_json(text: str | None, run_id: str, what: str) -> Any:
    if text is None:
        return None
    try:
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except Exception:  # noqa: BLE001 - not JSON from its first character: loads says why, or reads it
        pass
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedRecordError(run_id, what, f"stored value is not JSON ({exc})") from exc


class StatementsBase:
    """One dialect's prepared statements: each part adds its own with a ``_build_<area>`` method.
    The clock every part may read is built here."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self.dialect = dialect
        self.policy = policy_for(dialect.name)
        self.clock = self._prepare(sa.select(self.policy.clock()))

    def _prepare(self, statement: sa.ClauseElement) -> Prepared:
        return Prepared(statement, self.dialect)


class PlumbingStatements(Protocol):
    """The statements every part may read (``StatementsBase``'s)."""

    clock: Prepared


class SqlPlumbing:
    """The connections and transactions every part of ``SqlJournal`` runs its statements through."""

    engine: sa.Engine
    policy: DialectPolicy
    _connections: driver.Connections
    # The composed statements of every part (``statements.Statements``), set by the journal that
    # composes the parts. Each part narrows it to a protocol of the statements it reads (its own
    # and other areas'), so mypy checks every read against what ``Statements`` builds.
    _q: PlumbingStatements

    def _write(
        self,
        work: Callable[[driver.Tx], T],
        *,
        atomic: bool = False,
        durable: bool = False,
        alone: str | None = None,
    ) -> T:
        """Run ``work``, which writes, on the driver (the hot path: see ``driver.transaction``).

        ``atomic`` when its statements must commit together (a claim's gate and insert, a fork);
        otherwise each statement is atomic alone and the work allows for writers between them.
        ``durable`` when the commit must be on stable storage before this returns (SQLite's other
        commits are synced lazily, at checkpoints: see ``driver.transaction``).

        ``alone`` names an unwind's write (a tombstone, a compensation's claim or lease, the unwind's
        rows, the sweeper's state), which must commit on its own: where the app's open transaction
        would be joined (hosts.py), it is refused before anything is written (UnwindInTransactionError).
        Not run on the journal's own connection instead: that one would wait for rows the joined
        transaction locks (the run's row), in this same thread, for ever; on SQLite for its one lock."""
        loan = hosts.lent(self.engine.url)
        if loan is not None:  # the app's open transaction, joined (hosts.py); nothing done until entered
            if alone is not None:
                raise UnwindInTransactionError(alone)
            return driver.on_lent(self._connections, loan, work)
        return driver.transaction(self._connections, work, write=True, atomic=atomic, durable=durable)

    def _fetch(self, work: Callable[[driver.Tx], T]) -> T:
        """Run ``work``, which only reads; each read is a fresh look, as under READ COMMITTED (in a
        joined app transaction, a look that sees its writes)."""
        loan = hosts.lent(self.engine.url)
        if loan is not None:
            return driver.on_lent(self._connections, loan, work)
        return driver.transaction(self._connections, work, write=False, atomic=False)

    def now(self) -> float:
        if not self.policy.clock_is_the_servers:
            return time.time()
        row = self._fetch(lambda tx: tx.one(self._q.clock, {}))
        assert row is not None
        return float(next(iter(row.values())))
