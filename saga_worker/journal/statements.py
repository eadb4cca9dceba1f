"""Every fixed statement of the SQL journal, written once in SQLAlchemy Core and prepared per dialect.

Each part of the SQL journal (``sql_parts/``) builds its area's statements beside its methods, one
``_build_<area>`` method each; ``Statements`` composes them into one object of attributes named for
what they do. A new statement goes into its area's builder, a new area gets a builder of its own,
called here. What differs between SQLite and PostgreSQL is the dialect policy's (``dialects.py``),
never a branch in a statement. The bound parameters the areas share, and their names, are in
``sql_parts/common.py``.
"""

from __future__ import annotations

import sqlalchemy as sa

from .sql_parts.audit import AuditReads, AuditStatements
from .sql_parts.claims import ClaimReads, ClaimStatements
from .sql_parts.common import StatementsBase
from .sql_parts.common import server_clock as server_clock  # tests/faults/breaks.py
from .sql_parts.gate import GateStatements
from .sql_parts.records import RecordReads, RecordStatements
from .sql_parts.retention import RetentionReads, RetentionStatements
from .sql_parts.runs import RunReads, RunStatements
from .sql_parts.shared import SharedReads, SharedStatements
from .sql_parts.sweeps import SweepReads, SweepStatements
from .sql_parts.tombstone import TombstoneReads, TombstoneStatements
from .sql_parts.unwinds import UnwindReads, UnwindStatements


class Statements(
    RunStatements,
    TombstoneStatements,
    GateStatements,
    RecordStatements,
    AuditStatements,
    SharedStatements,
    ClaimStatements,
    SweepStatements,
    UnwindStatements,
    RetentionStatements,
    StatementsBase,
):
    """The prepared statements of one dialect, as attributes named for what they do."""

    def __init__(self, dialect: sa.Dialect) -> None:
        super().__init__(dialect)
        self._build_runs()
        self._build_tombstone()
        self._build_gate()
        self._build_wake()
        self._build_sweeps()
        self._build_listings()
        self._build_forks()
        self._build_decisions()
        self._build_records()
        self._build_record_transitions()
        self._build_claims()
        self._build_compensation_gates()
        self._build_audit()
        self._build_condemn_audited()
        self._build_condemn_claimed(self._condemn_stamp())
        self._build_unwind_state_audited()
        self._build_last_step()
        self._build_shared()
        self._build_unwinds()
        self._build_unwind_held(self._hold_sweep())
        self._build_step_view()
        self._build_step_claimed()
        self._build_step_finish()
        self._build_step_finish_ended(self._unwind_state)
        self._build_retention()


# Each dialect's statements, compiled once per process and shared by every journal whose engine the
# journal made itself (``DialectPolicy.create_engine``: the same options, so the same SQL). A worker's
# main process compiles them before its pool forks (``journal.prepare_journal``), so each pool child
# inherits them instead of compiling them again on its first task.
_SHARED: dict[tuple[type[sa.Dialect], str], Statements] = {}


def shared_statements(dialect: sa.Dialect) -> Statements:
    """The statements of ``dialect``'s kind, compiled on first use in this process."""
    key = (type(dialect), dialect.paramstyle)
    statements = _SHARED.get(key)
    if statements is None:
        statements = _SHARED[key] = Statements(dialect)
    return statements


def _every_part_reads_only_what_is_built(
    q: Statements,
) -> tuple[
    AuditReads,
    ClaimReads,
    RecordReads,
    RunReads,
    SharedReads,
    SweepReads,
    TombstoneReads,
    UnwindReads,
    RetentionReads,
]:
    """Never called: mypy checks that the composed statements hold every statement each part reads
    (each part's ``_q`` protocol), so a part cannot read a statement no area builds."""
    return q, q, q, q, q, q, q, q, q
