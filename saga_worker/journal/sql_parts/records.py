"""Tool records in SQL: claimed before ``execute``, settled by compare-and-set, under an execute lease."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import RecordStatus, ToolRecord, parse_status
from .common import load_json as _load


def record_row(m: Mapping[Any, Any]) -> ToolRecord:
    rid, what = m["run_id"], f"{m['suffix']!r}"
    return ToolRecord(
        run_id=rid,
        suffix=m["suffix"],
        seq=m["seq"],
        step=m["step"],
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        mode=m["mode"],
        input=_load(m["input"], rid, what + " input"),
        status=parse_status(RecordStatus, m["status"], rid, what),
        output=_load(m["output"], rid, what + " output"),
        error=m["error"],
        attempts=m["attempts"],
        origin_run_id=m["origin_run_id"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        shared_id=m.get("shared_id"),
        exec_owner=m.get("exec_owner"),
        exec_lease_expires_at=m.get("exec_lease_expires_at"),
        exec_traceparent=m.get("exec_traceparent"),
    )
