"""The PostgreSQL journal's statements by length, against psycopg's parsing cache.

psycopg keeps its parsing of a statement (placeholders rewritten as ``$1``, ``$2``, ...) only for a
statement of at most ``MAX_CACHED_STATEMENT_LENGTH`` bytes and ``MAX_CACHED_STATEMENT_PARAMS``
parameters (``psycopg/_queries.py``); a longer one is parsed again on every call, ~150 µs on this
machine. Printed for every statement the journal prepares, longest first; the ones an unwind sends
are held under the limits by ``tests/journal/test_statement_lengths.py``. Needs no database.

    python -m bench.statement_lengths [--all]
"""

from __future__ import annotations

import argparse

from psycopg import _queries
from sqlalchemy.dialects import postgresql

from saga_worker.journal.driver import Prepared
from saga_worker.journal.statements import Statements

TOP = 15


def lengths() -> list[tuple[str, int, int]]:
    """Each prepared statement's name, its text's length in bytes and its parameter count."""
    statements = Statements(postgresql.psycopg.dialect())
    found = [
        (name, len(stmt.sql.encode()), len(stmt.bind({n: None for n in stmt._names})))
        for name, stmt in vars(statements).items()
        if isinstance(stmt, Prepared)
    ]
    return sorted(found, key=lambda row: -row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help=f"every statement, not the {TOP} longest")
    args = parser.parse_args()
    length, params = _queries.MAX_CACHED_STATEMENT_LENGTH, _queries.MAX_CACHED_STATEMENT_PARAMS
    rows = lengths()
    print(f"psycopg caches its parsing up to {length} bytes and {params} parameters")
    print(f"{'statement':<32} {'bytes':>6} {'params':>6}  cached")
    for name, n, p in rows if args.all else rows[:TOP]:
        print(f"{name:<32} {n:>6} {p:>6}  {'yes' if n <= length and p <= params else 'NO'}")
    print(f"{len(rows)} statements, {sum(n > length or p > params for _, n, p in rows)} not cached")


if __name__ == "__main__":
    main()
