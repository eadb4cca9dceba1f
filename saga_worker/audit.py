"""The audit trail: who condemned a run and why, who approved or denied what, how each unwind ended.

The journal keeps it append-only, per run (docs/reference/approvals.md). Rows are written by the actions
themselves, in the same transaction where the action has one (the tombstone, an approval), so the
trail can never claim an action that did not happen. Dry runs write nothing, so they are not in it.
"""

from __future__ import annotations

import functools
import getpass
from dataclasses import asdict
from typing import Any

from .errors import InvalidInputError
from .journal.base import Journal
from .journal.records import AuditRecord, AuditVia
from .keys import check_run_id
from .settings import get_settings
from .storable import check_storable_text


def default_actor() -> str:
    """The actor named when a caller names none: ``SAGA_ACTOR``, else the OS user."""
    configured = get_settings().actor
    return configured or _os_user()


@functools.cache
def _os_user() -> str:
    """The process's user name, looked up once (a passwd lookup per unwind was a tenth of a plan)."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without a passwd entry)
        return "unknown"


def check_actor(actor: object) -> str:
    if not isinstance(actor, str) or not actor.strip() or len(actor) > 200:
        raise InvalidInputError(f"actor must be a non-empty name of at most 200 characters, got {actor!r}")
    return check_storable_text(actor.strip(), "actor")


def check_reason(reason: object) -> str:
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise InvalidInputError(f"reason must be a string, got {type(reason).__name__}")
    return check_storable_text(reason, "reason")


def check_via(via: object) -> AuditVia:
    try:
        return AuditVia(via)
    except ValueError:
        known = ", ".join(v.value for v in AuditVia)
        raise InvalidInputError(f"via must be one of {known}, got {via!r}") from None


def read_audit(journal: Journal, run_id: str) -> list[AuditRecord]:
    """The run's audit trail, oldest first (empty for a run never condemned, approved or unwound)."""
    return journal.read_audit(check_run_id(run_id))


def audit_dict(row: AuditRecord) -> dict[str, Any]:
    """A row as plain JSON-ready values (for ``--json`` and web consoles)."""
    data = asdict(row)
    data["action"] = row.action.value
    data["via"] = row.via.value
    return data


__all__ = ["audit_dict", "default_actor", "read_audit"]
