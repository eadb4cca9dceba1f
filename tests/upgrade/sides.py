"""One side of the compatibility test: ``python sides.py COMMAND URL PREFIX``, run by the previous
release's interpreter or by the current code's, importing nothing but ``saga_worker``'s public API (so
the same file speaks for either release).

- ``write``: a run of each kind under ``PREFIX``: ``-finished`` (runs and calls), ``-unwound``
  (condemned and unwound: claims, the unwind, its report), ``-refused`` (an unwind whose second step
  the provider refused: a failed claim waiting for a retry) and ``-crashed`` via ``crash``.
- ``crash``: condemns ``PREFIX-crashed`` and dies (``os._exit``) inside the hook of its second step,
  leaving that step's claim held under a lease nobody renews.
- ``read``: what this release reads of those rows, then each unfinished unwind finished by this
  release (the crashed one once its lease is past), as JSON with the prefix taken out: the test
  compares what each release reads and reports of the same rows.

The provider is a file (``SIDES_LEDGER``): a line per compensation applied, and a key seen before is
a duplicate the provider absorbs (``applied`` counts each key once; ``calls`` counts every call).
A process of the previous release that opened its journal before the expand migration reads it at a
revision it does not ship; ``SIDES_OPENED_BEFORE_EXPAND=1`` opens it so (the revision check skipped),
as such a worker does (docs/guides/upgrading.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from saga_worker import JournalError, Tool, ToolCall, compensate_run, open_journal, run_durable, scripted

LEDGER = os.environ.get("SIDES_LEDGER", "/dev/null")
STEPS = 3


def ledger_lines() -> list[str]:
    try:
        with open(LEDGER) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def tools(*, refuse: str = "", crash: str = "") -> dict[str, Tool]:
    """``pay``: its hook appends ``KEY`` to the ledger; refuses (raises) when the key ends with
    ``refuse`` and has never been seen, dies when it ends with ``crash``."""

    def execute(input: dict[str, Any], opts: Any) -> dict[str, Any]:
        return {"paid": input["n"]}

    def undo(input: dict[str, Any], output: Any, opts: Any) -> None:
        key = opts.idempotency_key
        if crash and key.endswith(crash):
            os._exit(3)
        if refuse and key.endswith(refuse) and f"refused {key}" not in ledger_lines():
            with open(LEDGER, "a") as f:
                f.write(f"refused {key}\n")
            raise RuntimeError(f"provider refused {key}")
        with open(LEDGER, "a") as f:
            f.write(f"applied {key}\n")

    return {"pay": Tool(execute, undo), "note": Tool(lambda input, opts: "noted")}


def plan() -> Any:
    calls = [ToolCall("pay", {"n": i}) for i in range(1, STEPS)]
    return scripted(*calls, ToolCall("note", {"text": "done"}))


def journal(url: str) -> Any:
    try:
        return open_journal(url, migrate=False)
    except JournalError:
        if os.environ.get("SIDES_OPENED_BEFORE_EXPAND") != "1":
            raise
        import sqlalchemy as sa

        from saga_worker.journal import migrate

        engine = sa.create_engine(url)
        current = migrate.current_revision(engine)
        engine.dispose()
        migrate.head_revision = lambda: current  # type: ignore[assignment]  # as opened before the expand
        return open_journal(url, migrate=False)


def write(url: str, prefix: str) -> None:
    j = journal(url)
    for name in ("finished", "unwound", "refused", "crashed"):
        run_durable(f"{prefix}-{name}", journal=j, tools=tools(), prompt=name, planner=plan())
    compensate_run(f"{prefix}-unwound", journal=j, tools=tools())
    try:
        compensate_run(f"{prefix}-refused", journal=j, tools=tools(refuse=":call-2"))
    except Exception as exc:  # a refused step may end the call as well as mark it: either leaves the row
        print(f"refused: {type(exc).__name__}", file=sys.stderr)
    j.close()


def crash(url: str, prefix: str) -> None:
    j = journal(url)
    compensate_run(f"{prefix}-crashed", journal=j, tools=tools(crash=":call-2"))
    raise SystemExit("the hook did not crash")


def view(j: Any, run_id: str, prefix: str) -> dict[str, Any]:
    run = j.get_run(run_id)
    records = j.list_records(run_id)
    claims = [j.get_claim(r.origin_run_id, r.suffix) for r in records]
    return {
        "status": run.status.value,
        "condemned": run.condemned_at is not None,
        "prompt": run.prompt,
        "records": [
            [r.suffix, r.tool_name, r.status.value, r.output, r.step, r.origin_run_id.replace(prefix, "P")]
            for r in records
        ],
        "claims": [
            None
            if c is None
            else [c.suffix, c.status.value, c.idempotency_key.replace(prefix, "P"), c.error is not None]
            for c in claims
        ],
    }


def read(url: str, prefix: str) -> None:
    j = journal(url)
    ttl = float(os.environ.get("SAGA_CLAIM_TTL", "1"))
    out: dict[str, Any] = {"before": {}, "reports": {}, "after": {}}
    names = ("finished", "unwound", "refused", "crashed")
    for name in names:
        out["before"][name] = view(j, f"{prefix}-{name}", prefix)
    time.sleep(ttl + 0.5)  # the crashed hook's lease is past: this release takes the step over
    for name in ("unwound", "refused", "crashed"):
        report = compensate_run(f"{prefix}-{name}", journal=j, tools=tools())
        out["reports"][name] = [
            [e.tool_name, e.status.value, e.idempotency_key.replace(prefix, "P")] for e in report.entries
        ]
    for name in names:
        out["after"][name] = view(j, f"{prefix}-{name}", prefix)
    j.close()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    command, url, prefix = sys.argv[1:4]
    {"write": write, "crash": crash, "read": read}[command](url, prefix)
TOOLS = tools()  # what a worker of either release loads: SAGA_TOOLS=sides:TOOLS
