"""Schema migrations (Alembic), run programmatically: `saga-worker db upgrade`, or on open for SQLite."""

from __future__ import annotations

import functools
import logging

# Alembic's plugin set-up lines ("setup plugin alembic.autogenerate...", 7 of them) are logged at INFO
# when alembic is first imported, in each Celery pool child's first task: noise, always. Before the
# import below, which is when they are logged.
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)

from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import sqlalchemy as sa  # noqa: E402
import tenacity  # noqa: E402
from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402

from ..errors import JournalError  # noqa: E402
from .dialects import policy_for  # noqa: E402

MIGRATIONS = Path(__file__).with_name("migrations")

_CONTEXT_LOG = logging.getLogger("alembic.runtime.migration")


@contextmanager
def _quiet_context() -> Iterator[None]:
    """Reading the revision on open logs "Context impl ..." and "Will assume ... DDL" at INFO: said
    once per process and journal, they tell nothing. An upgrade keeps them (with "Running upgrade")."""
    before = _CONTEXT_LOG.level
    _CONTEXT_LOG.setLevel(max(before, logging.WARNING))
    try:
        yield
    finally:
        _CONTEXT_LOG.setLevel(before)


VERSION_TABLE = "saga_alembic_version"


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """What autogenerate compares: everything but the indexes only a migration knows (see schema)."""
    from .schema import MIGRATION_ONLY_INDEXES

    return not (type_ == "index" and name in MIGRATION_ONLY_INDEXES)


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    """The newest revision among the migrations this package ships (read once per process)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this package ships."""
    return frozenset(s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions())


def from_a_later_release(revision: str | None) -> bool:
    """Is ``revision`` one this package does not ship: a later release's migration, run during a
    rolling upgrade while this release's workers still serve (docs/guides/upgrading.md)? A later
    release's expand migration only adds, so this release still reads and writes the journal; its
    contract migration runs only once no worker of this release is left."""
    return revision is not None and revision not in known_revisions()


def current_revision(engine: sa.Engine) -> str | None:
    with _quiet_context(), engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


# A schema change waits this long for each table's lock before it rolls back and tries again: while it
# waits, the statements of running workers on that table queue behind it.
LOCK_WAIT_S = 2.0
# How long `db upgrade` keeps trying before it gives up and says which transactions held it up.
PATIENCE_S = 600.0

_LOG = logging.getLogger(__name__)


def _migrate(
    engine: sa.Engine, change: Callable[[sa.Connection], None], what: str, lock_wait: float, patience: float
) -> None:
    """Run ``change`` in one transaction, one migrating process at a time, with each lock wait bounded
    by ``lock_wait``. Running workers' transactions can hold a table the change alters, or wait for one
    it altered already (a deadlock, which PostgreSQL ends by rolling one side back): the change is
    then rolled back whole and tried again, a little later each time, for up to ``patience`` seconds."""
    policy = policy_for(engine.dialect.name)

    def once() -> None:
        with engine.begin() as conn:
            policy.serialise_migrations(conn)
            policy.bound_lock_waits(conn, lock_wait)
            change(conn)

    def log_retry(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        _LOG.warning(
            "%s rolled back (%s; attempt %d, %.0f s so far): running transactions hold the journal's "
            "tables; trying again in %.1f s",
            what,
            policy.lock_conflict(exc) if exc is not None else "?",
            state.attempt_number,
            state.seconds_since_start or 0.0,
            delay,
        )

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: policy.lock_conflict(exc) is not None),
        wait=tenacity.wait_random_exponential(multiplier=lock_wait / 4, max=max(lock_wait, 10.0)),
        stop=tenacity.stop_after_delay(patience),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        retrying(once)
    except sa.exc.DBAPIError as exc:
        conflict = policy.lock_conflict(exc)
        if conflict is None:
            raise
        raise JournalError(
            f"{what} gave up after {patience:.0f} s (last try: {conflict}): running transactions kept the "
            "journal's tables locked. Look for long transactions in pg_stat_activity (state "
            "'idle in transaction'), end them, and run it again; nothing was changed",
            conflict=conflict,
        ) from exc


def upgrade(
    engine: sa.Engine, revision: str = "head", *, lock_wait: float = LOCK_WAIT_S, patience: float = PATIENCE_S
) -> None:
    _migrate(
        engine,
        lambda conn: command.upgrade(_config(conn), revision),
        f"the schema upgrade to {revision}",
        lock_wait,
        patience,
    )


def downgrade(
    engine: sa.Engine, revision: str, *, lock_wait: float = LOCK_WAIT_S, patience: float = PATIENCE_S
) -> None:
    _migrate(
        engine,
        lambda conn: command.downgrade(_config(conn), revision),
        f"the schema downgrade to {revision}",
        lock_wait,
        patience,
    )
