"""A Django app in a process of its own (Django's settings are process-wide: configuring them in the
test process would make every later test a Django project's), making a payment through a ``saga()``
block with autocommit turned off, then again with it back on.

    python -m tests.procs.django_child --database JSON --journal URL --run RUN_ID

``--database`` is Django's ``DATABASES["default"]``. The charge and its refund are writes on
Django's own connection. Prints one JSON line: whether the call made with autocommit off was
refused, the payments and records after the app rolled back, the unwind's entries, and the same for
the run made after autocommit came back on.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--run", required=True)
    args = parser.parse_args(argv)

    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["saga_worker.contrib.django"],
        DATABASES={"default": json.loads(args.database)},
        USE_TZ=True,
        SAGA_JOURNAL_URL=args.journal,
    )
    django.setup()
    from django.db import connection, transaction

    from saga_worker import OpenTransactionError, Tool, compensate_run, open_journal, saga

    def sql(statement: str, params: list[Any] | None = None) -> list[Any]:
        with connection.cursor() as cur:
            cur.execute(statement, params or [])
            return [list(row) for row in cur.fetchall()] if cur.description else []

    sql("CREATE TABLE IF NOT EXISTS django_payments (pay_key varchar(200) PRIMARY KEY, refunded integer)")
    sql("DELETE FROM django_payments")

    def charge(input: Any, opts: Any) -> dict[str, str]:
        sql("INSERT INTO django_payments VALUES (%s, 0)", [opts.idempotency_key])
        return {"key": opts.idempotency_key}

    def refund(input: Any, output: Any, opts: Any) -> None:
        sql("UPDATE django_payments SET refunded = 1 WHERE pay_key = %s", [output["key"]])

    tools = {"charge": Tool(charge, refund)}
    journal = open_journal(args.journal, migrate=True)

    def attempt(run_id: str) -> str | None:
        try:
            with saga(run_id, journal=journal, tools=tools) as run:
                run.call("charge", {"amount": 10})
        except OpenTransactionError as exc:
            return str(exc)
        return None

    def seen(run_id: str) -> dict[str, Any]:
        report = compensate_run(run_id, journal=journal, tools=tools)
        return {
            "records": [[r.suffix, r.status.value] for r in journal.list_records(run_id)],
            "entries": [[e.suffix, e.status.value] for e in report.entries],
            "payments": sql("SELECT pay_key, refunded FROM django_payments ORDER BY pay_key"),
        }

    out: dict[str, Any] = {}
    transaction.set_autocommit(False)  # the app manages its transactions by hand
    out["refused"] = attempt(args.run)
    transaction.rollback()  # the app's transaction, with whatever the call wrote in it, rolls back
    transaction.set_autocommit(True)
    out["off"] = seen(args.run)
    out["on_refused"] = attempt(f"{args.run}-on")
    out["on"] = seen(f"{args.run}-on")
    journal.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
