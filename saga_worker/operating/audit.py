"""The audit trail: who condemned a run and why, who approved or denied what, how each unwind ended.

The journal keeps it append-only, per run (docs/reference/approvals.md). Rows are written by the actions
themselves, in the same transaction where the action has one (the tombstone, an approval), so the
trail can never claim an action that did not happen. Dry runs write nothing, so they are not in it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

# Public here on purpose: docs/reference/approvals.md names ``saga_worker.operating.audit.REASON_MAX``.
from ..core.checks import REASON_MAX as REASON_MAX
from ..core.checks import check_run_id
from ..journal.parts import AuditPart
from ..journal.records import AuditRecord


def read_audit(journal: AuditPart, run_id: str) -> list[AuditRecord]:
    """The run's audit trail, oldest first (empty for a run never condemned, approved or unwound)."""
    return journal.read_audit(check_run_id(run_id))


def audit_dict(row: AuditRecord) -> dict[str, Any]:
    """A row as plain JSON-ready values (for ``--json`` and web consoles)."""
    data = asdict(row)
    data["action"] = row.action.value
    data["via"] = row.via.value
    return data


__all__ = [
    "REASON_MAX",
    "audit_dict",
    "read_audit",
]
