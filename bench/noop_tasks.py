"""Tasks registered on the saga worker's app (``celery -A saga_worker.celery:app worker -I
bench.noop_tasks``), so that the floors of the distributed figures run on the same worker, with the
same settings, as ``saga.compensate_run``.

- ``bench.noop``: Celery's own no-op task.
- ``bench.contract_start`` and ``bench.contract_step``: **the contract's bare tasks** (issue 45's
  "leanest card-shaped bare tasks"), what any implementation of the distributed unwind must do on
  this worker, and nothing else, with plain psycopg on the journal's PostgreSQL database and plain redis-py on the lock Redis (one connection
  of each per pool process, as the journal's sessions are set up: autocommit, ``synchronous_commit``
  off, the tombstone's transaction waiting for its flush). The journal's own statements on its own
  tables (saga_worker/journal/sql_parts), the step lock's own Lua scripts (saga_worker/locks/redis.py):

  - the coordinator: the tombstone (with its audit row, one statement, as the journal writes it) in
    a durable transaction, and the worklist read (the run's tool records; workers trust only ids
    in a message), pipelined in one round trip (the journal pipelines them too);
  - each step: the lock (EVALSHA), the step's read folded into its claim (the record by primary key
    and the claim's insert-if-absent from it, one ``INSERT … SELECT … RETURNING`` statement, committed
    before the hook), the no-op hook, the outcome with the step's unwind entry (one statement, as the
    journal's ``step_finish``), the lock's release (EVALSHA): two PostgreSQL round trips a step;
  - the last step also writes the end state with its audit row (one statement) and reads the
    unwind's entries back for the report (pipelined with it: one round trip), which it stores as
    the coordinator's result.

  They carry the unwind on as ``saga.compensate_run`` does (saga_worker/celery/tasks.py): each task
  sends the next one's message itself and stores no result of its own; the last stores the report
  under the coordinator's task id (the unwind id), which the caller waits on. Each message carries
  ids only: the run, the unwind, the step's position and the worklist's step suffixes (the
  coordinator's read; where ``saga.compensate_run`` stores the worklist and each step re-reads it).
  A Celery chain of the same tasks (each result stored, the rest of the chain in every message) costs
  more than that, so it would be no floor (bench/history/2026-12-07-issue-45.md, "Distributed").

  No saga_worker code runs in them (the settings aside, read once per process for the URLs), no
  checks beyond what the statements do, no retries, tracing, metrics or leases kept alive.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from celery import Task, states

from saga_worker.celery import default_app
from saga_worker.locks.redis import _ACQUIRE, _RELEASE

app = default_app()

CLAIM_TTL = 30.0  # SAGA_CLAIM_TTL's default: the claim's lease and the lock's expiry
LOCK_PREFIX = "saga:lock:"  # RedisStepLock's

# The journal's statements as it compiles them for PostgreSQL (``journal._q.<name>.sql``), with the
# same columns, clocks and RETURNING clauses.
CLOCK = "CAST(EXTRACT(epoch FROM clock_timestamp()) AS DOUBLE PRECISION)"
AUDIT_COLUMNS = "run_id, at, action, actor, via, reason, target, detail, event_key"
RECORD_COLUMNS = (
    "run_id, suffix, seq, step, tool_call_id, tool_name, mode, input, status, output, error, attempts, "
    "origin_run_id, created_at, updated_at, shared_id, exec_owner, exec_lease_expires_at, exec_traceparent"
)
CLAIM_COLUMNS = (
    "origin_run_id, suffix, status, owner, lease_expires_at, attempts, idempotency_key, via_run_id, error, "
    "started_at, finished_at"
)
# condemn_stamp_audited: the tombstone and its "condemned" audit row, one statement
TOMBSTONE = (
    f"WITH tombstone_stamp AS (UPDATE saga_runs SET condemned_at={CLOCK}, unwind_state='pending', "
    f"unwind_next_at={CLOCK}, updated_at={CLOCK} WHERE saga_runs.run_id = %(run)s AND "
    "saga_runs.condemned_at IS NULL RETURNING saga_runs.run_id, saga_runs.condemned_at), "
    f"logged AS (INSERT INTO saga_audit ({AUDIT_COLUMNS}) SELECT tombstone_stamp.run_id, {CLOCK}, "
    "'condemned', %(who)s, 'worker', '', NULL, '{}', NULL FROM tombstone_stamp "
    "ON CONFLICT (event_key) DO NOTHING) SELECT tombstone_stamp.condemned_at FROM tombstone_stamp"
)
# records_of_run: the worklist
WORKLIST = f"SELECT {RECORD_COLUMNS} FROM saga_tool_records WHERE run_id = %(run)s ORDER BY seq"
# The step's read folded into its claim (issue 45): the step's record by primary key, and the claim's
# insert-if-absent from it (``claim_insert``'s columns and values) only for a succeeded record, one
# statement; the row gives the record's columns the entry needs and whether the claim was taken.
STEP_CLAIM = (
    "WITH rec AS (SELECT r.origin_run_id, r.suffix, r.tool_call_id, r.tool_name, r.status "
    "FROM saga_tool_records AS r WHERE r.run_id = %(run)s AND r.suffix = %(step_suffix)s), "
    "claimed AS (INSERT INTO saga_compensations (origin_run_id, suffix, status, owner, lease_expires_at, "
    "attempts, idempotency_key, via_run_id, started_at) SELECT rec.origin_run_id, rec.suffix, 'claimed', "
    f"%(holder)s, ({CLOCK} + %(ttl)s), 1, %(key)s, %(via)s, {CLOCK} FROM rec WHERE rec.status = 'succeeded' "
    f"ON CONFLICT (origin_run_id, suffix) DO NOTHING RETURNING {CLAIM_COLUMNS}) "
    "SELECT rec.tool_call_id, rec.tool_name, claimed.attempts FROM rec LEFT OUTER JOIN claimed ON true"
)
# step_finish: the claim's compare-and-set and the step's unwind entry, one statement
OUTCOME = (
    f"WITH finished AS (UPDATE saga_compensations SET status='compensated', error=NULL, finished_at={CLOCK} "
    "WHERE saga_compensations.origin_run_id = %(origin)s AND saga_compensations.suffix = %(step_suffix)s "
    "AND saga_compensations.owner = %(holder)s AND saga_compensations.status = 'claimed' "
    "RETURNING saga_compensations.owner), "
    "inserted AS (INSERT INTO saga_unwind_entries (unwind_id, position, entry, created_at) "
    "SELECT %(unwind)s, %(at)s, CASE WHEN (EXISTS (SELECT finished.owner FROM finished)) "
    "THEN %(won_entry)s ELSE %(lost_entry)s END, %(now)s ON CONFLICT (unwind_id, position) DO NOTHING "
    "RETURNING saga_unwind_entries.entry) "
    "SELECT EXISTS (SELECT finished.owner FROM finished) AS written, "
    "(SELECT inserted.entry FROM inserted) AS entry"
)
# unwind_state_audited: the end state and its "unwound" audit row, one statement
END_STATE = (
    f"WITH logged AS (INSERT INTO saga_audit ({AUDIT_COLUMNS}) SELECT %(run)s, {CLOCK}, 'unwound', "
    "%(who)s, 'worker', '', NULL, %(details)s, %(event)s ON CONFLICT (event_key) DO NOTHING) "
    "UPDATE saga_runs SET unwind_state='complete', unwind_attempts=(saga_runs.unwind_attempts + 0), "
    "unwind_next_at=NULL, unwind_note=NULL, updated_at=%(now)s WHERE saga_runs.run_id = %(run)s"
)
# entries_of_unwind: the report's entries
ENTRIES = "SELECT position, entry FROM saga_unwind_entries WHERE unwind_id = %(unwind)s ORDER BY position"


@app.task(name="bench.noop")
def noop(*_args: object) -> None:
    return None


_conns: dict[int, tuple[Any, Any, Any, Any]] = {}


def _connections() -> tuple[Any, Any, Any, Any]:
    """This pool process's PostgreSQL connection and Redis lock scripts, opened on first use."""
    got = _conns.get(os.getpid())
    if got is None:
        import psycopg
        import redis
        import sqlalchemy as sa

        from saga_worker.settings import get_settings

        settings = get_settings()
        url = sa.engine.make_url(settings.resolved_journal_url()).set(drivername="postgresql")
        pg = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
        pg.execute("SET synchronous_commit TO off")  # the journal's sessions (_pg_on_connect)
        client = redis.Redis.from_url(
            settings.redis_url or "", socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
        )
        got = _conns[os.getpid()] = (
            pg,
            pg.cursor(),
            client.register_script(_ACQUIRE),
            client.register_script(_RELEASE),
        )
    return got


@app.task(name="bench.contract_start", bind=True, ignore_result=True)
def contract_start(self: Task[Any, Any], run_id: str) -> None:
    """The coordinator, sent with the unwind id as its task id: the tombstone, durable, and the
    worklist, in one round trip; then the first step's message."""
    pg, _cur, _acquire, _release = _connections()
    with pg.pipeline():
        pg.execute("BEGIN")
        pg.execute("SET LOCAL synchronous_commit TO DEFAULT")  # DURABLE_COMMIT: waits for the flush
        stamped = pg.execute(TOMBSTONE, {"run": run_id, "who": "bench"})
        worklist = pg.execute(WORKLIST, {"run": run_id})
        pg.execute("COMMIT")
    assert stamped.fetchone() is not None, f"run {run_id} was condemned already"
    suffixes = [row[1] for row in reversed(worklist.fetchall())]  # unwind order: the last call first
    assert suffixes, f"run {run_id} has no records"
    contract_step.apply_async(args=[run_id, self.request.id, 0, suffixes])


@app.task(name="bench.contract_step", ignore_result=True)
def contract_step(run_id: str, unwind_id: str, position: int, worklist: list[str]) -> None:
    """One step: read, lock, claim, no-op hook, outcome with its entry, release; then the next step's
    message, or, after the last, the end state and the report under the coordinator's id."""
    suffix = worklist[position]
    pg, cur, acquire, release = _connections()
    key = f"{run_id}:comp:{suffix}"  # compensate_key
    token = hashlib.sha256(f"{unwind_id}\n{suffix}".encode()).hexdigest()[:16]  # Twins' token
    owner = f"{token}:{position}"
    ttl_ms = int(CLAIM_TTL * 1000)
    assert acquire(keys=[LOCK_PREFIX + key], args=[token, ttl_ms]), "lock held"
    try:
        cur.execute(
            STEP_CLAIM,
            {
                "run": run_id,
                "step_suffix": suffix,
                "holder": owner,
                "ttl": CLAIM_TTL,
                "key": key,
                "via": run_id,
            },
        )
        record = cur.fetchone()
        assert record is not None and record[2] is not None, ("not claimed", run_id, suffix)
        noop()  # the hook
        entry = {
            "suffix": suffix,
            "tool_call_id": record[0],
            "tool_name": record[1],
            "status": "compensated",
            "error": None,
            "attempts": 1,
        }
        cur.execute(
            OUTCOME,
            {
                "origin": run_id,
                "step_suffix": suffix,
                "holder": owner,
                "unwind": unwind_id,
                "at": position,
                "won_entry": json.dumps(entry),
                "lost_entry": json.dumps({**entry, "status": "busy"}),
                "now": time.time(),
            },
        )
        written = cur.fetchone()
        assert written is not None and written[0], "outcome not written"
    finally:
        release(keys=[LOCK_PREFIX + key], args=[token])
    if position + 1 < len(worklist):
        contract_step.apply_async(args=[run_id, unwind_id, position + 1, worklist])
        return
    with pg.pipeline():
        pg.execute(
            END_STATE,
            {
                "run": run_id,
                "who": "bench",
                "details": json.dumps({"complete": True, "unwind_id": unwind_id}),
                "event": f"unwound:{unwind_id}",
                "now": time.time(),
            },
        )
        entries = pg.execute(ENTRIES, {"unwind": unwind_id})
    report = {"run_id": run_id, "entries": [json.loads(text) for _, text in entries.fetchall()]}
    contract_step.backend.store_result(unwind_id, report, states.SUCCESS)
