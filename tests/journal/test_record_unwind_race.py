"""Two coordinators recording one unwind at once on PostgreSQL: the one-statement insert-and-hold
(``unwind_held``) cannot see a row another transaction committed while it waited on that row's key,
and then reads it apart. Both get the unwind that was stored first; neither writes a second."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import open_journal
from saga_worker.journal.schema import unwinds

pytestmark = pytest.mark.postgres


def _waiting_on_a_lock(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")).scalar())


def test_an_unwind_committed_while_the_held_insert_waited_is_read_back_not_lost(pg_url: str) -> None:
    journal = open_journal(pg_url, migrate=True)
    engine = sa.create_engine(pg_url)
    first = engine.connect()
    try:
        first.begin()
        first.execute(
            unwinds.insert().values(
                unwind_id="u-race",
                run_id="r-race",
                dry_run=False,
                suffixes=json.dumps(["first-coordinator-step"]),
                created_at=time.time(),
                actor="first",
                via="worker",
            )
        )
        got: dict[str, Any] = {}

        def second_coordinator() -> None:
            try:
                got["info"] = journal.record_unwind(
                    "u-race", "r-race", dry_run=False, suffixes=["second-coordinator-step"], hold_grace=5.0
                )
            except BaseException as exc:  # handed to the test's thread
                got["error"] = exc

        thread = threading.Thread(target=second_coordinator)
        thread.start()
        deadline = time.monotonic() + 10
        while not _waiting_on_a_lock(engine):  # its insert waits on the first one's key
            assert thread.is_alive() and time.monotonic() < deadline, got
            time.sleep(0.02)
        first.commit()
        thread.join(10)
        assert "error" not in got, got.get("error")
        info = got["info"]
        assert (info.unwind_id, info.suffixes, info.actor) == ("u-race", ("first-coordinator-step",), "first")
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(unwinds)).scalar() == 1
    finally:
        first.close()
        engine.dispose()
        journal.close()
