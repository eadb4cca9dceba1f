"""Shared fixtures: a journal per backend (memory, SQLite, PostgreSQL), all real.

PostgreSQL tests get a database of their own per pytest session (so concurrent sessions cannot see
each other) and empty tables per test. SQLite tests get a fresh file per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

# Imported now, while the heap is small: hypothesis's pytest plugin imports it at the session's end
# otherwise, and pytest's assertion rewriting then parses it while a large heap's GC pass may run a
# finalizer that formats a traceback (another ast.parse): CPython up to 3.11.7 fails the session with
# "AST constructor recursion depth mismatch" (gh-106905; tests/agents/loops.py has the details).
import hypothesis  # noqa: F401
import pytest
import sqlalchemy as sa

from saga_worker import Journal, open_journal
from saga_worker.journal.schema import metadata
from saga_worker.settings import get_settings
from tests.journal.parts_only import PartsOnly
from tests.ledger import Ledger, open_ledger
from tests.services import PG_ADMIN_URL, REDIS_URL, require

BACKENDS = ["memory", "sqlite", "postgres"]
# and "memory-parts" (tests/journal/parts_only.py), which the contract's modules add with the marker


TERMINATE = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
)


def fresh_pg_database(prefix: str) -> Iterator[str]:
    """A new PostgreSQL database (named ``prefix`` + random hex), migrated to the newest schema;
    dropped when the generator is closed. Fixtures yield from it."""
    require("postgres")
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    open_journal(url, migrate=True).close()
    yield url
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A PostgreSQL database made for this pytest session, migrated to the newest schema."""
    yield from fresh_pg_database("saga_t_")


@pytest.fixture
def read_only_pg_url() -> Iterator[tuple[str, Callable[[bool], None]]]:
    """A PostgreSQL database of its own, and a switch that makes it read-only (as a standby is) for
    the sessions opened after it (``ALTER DATABASE … SET default_transaction_read_only``; turned off,
    it also ends the sessions opened while it was on, which keep it)."""
    database = fresh_pg_database("saga_ro_")
    url = next(database)
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = sa.engine.make_url(url).database

    def read_only(on: bool) -> None:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}'
                )
            )
            if not on:  # the sessions opened meanwhile keep it: ended, as a failover ends them
                conn.execute(sa.text(TERMINATE), {"name": name})

    try:
        yield url, read_only
    finally:
        read_only(False)
        admin.dispose()
        next(database, None)  # its cleanup: the database dropped


@pytest.fixture
def pg_url(pg_database_url: str) -> str:
    """The session's PostgreSQL database with every journal table emptied."""
    engine = sa.create_engine(pg_database_url)
    with engine.begin() as conn:
        names = ", ".join(t.name for t in metadata.sorted_tables)
        conn.execute(sa.text(f"TRUNCATE {names}"))
    engine.dispose()
    return pg_database_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


@pytest.hookimpl(tryfirst=True)  # before the test's own parametrize marks: ids read [backend-…]
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``journal_url`` (and so ``journal`` and ``ledger``) on every backend, or on those a module or
    test names with ``@pytest.mark.backends(...)``: one fixture whatever journals a test needs."""
    if "journal_url" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("journal_url", list(marker.args) if marker else BACKENDS, indirect=True)


@pytest.fixture
def journal_url(request: pytest.FixtureRequest) -> str:
    """A journal URL for each backend; memory:// only works in-process."""
    if request.param in ("memory", "memory-parts"):  # memory-parts: the journal fixture's PartsOnly
        return "memory://"
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=["sqlite", "postgres"])
def shared_journal_url(request: pytest.FixtureRequest) -> str:
    """A journal URL that several OS processes can open and share."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def journal(request: pytest.FixtureRequest, journal_url: str) -> Iterator[Journal]:
    parts_only = request.node.callspec.params.get("journal_url") == "memory-parts"
    j = PartsOnly() if parts_only else open_journal(journal_url, migrate=True)
    yield j
    j.close()


@pytest.fixture
def ledger_scope() -> str:
    """The ledger's scope: what a test's own processes pass to ``open_ledger`` to share its ledger."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def ledger(journal_url: str, ledger_scope: str) -> Iterator[Ledger]:
    """The effects the test's tools make, kept next to the journal (in memory for memory://)."""
    led = open_ledger(journal_url, ledger_scope)
    yield led
    led.close()


@pytest.fixture
def redis_url() -> str:
    require("redis")
    return REDIS_URL


@pytest.fixture
def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def set_claim_ttl() -> Iterator[Callable[[float], None]]:
    """Set ``SAGA_CLAIM_TTL`` (compensation claims and execute leases) for this test only.

    A crash a test makes in-process leaves the call's execute lease behind, as a killed process does;
    a short lease lapses as quickly as the test needs, where the default would hold it for 30 s."""
    before = os.environ.get("SAGA_CLAIM_TTL")

    def set_ttl(seconds: float) -> None:
        os.environ["SAGA_CLAIM_TTL"] = repr(float(seconds))
        get_settings.cache_clear()

    yield set_ttl
    if before is None:
        os.environ.pop("SAGA_CLAIM_TTL", None)
    else:
        os.environ["SAGA_CLAIM_TTL"] = before
    get_settings.cache_clear()
