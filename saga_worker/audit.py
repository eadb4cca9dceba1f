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

from .core.checks import ACTOR_MAX, NOT_IN_ACTOR, check_actor, check_choice, check_run_id

# Public here on purpose: docs/reference/approvals.md names ``saga_worker.audit.REASON_MAX``.
from .core.checks import REASON_MAX as REASON_MAX
from .errors import InvalidInputError
from .journal.parts import AuditPart
from .journal.records import AuditRecord, AuditVia
from .settings import get_settings


def default_actor() -> str:
    """The actor named when a caller names none: ``SAGA_ACTOR``, else the OS user (checked as any
    actor is: a ``SAGA_ACTOR`` with a control character is refused, naming the setting)."""
    configured = get_settings().actor
    if configured is None:
        user = _os_user()
        return user if NOT_IN_ACTOR.search(user) is None and 0 < len(user) <= ACTOR_MAX else "unknown"
    try:
        return check_actor(configured)
    except InvalidInputError as exc:
        raise InvalidInputError(f"SAGA_ACTOR: {exc}") from exc


@functools.cache
def _os_user() -> str:
    """The process's user name, looked up once (a passwd lookup per unwind was a tenth of a plan)."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without a passwd entry)
        return "unknown"


def check_via(via: object) -> AuditVia:
    """Through what an action came (``AuditVia``): the check is ``checks.check_choice``'s."""
    return check_choice(via, AuditVia, "via")


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
    "default_actor",
    "read_audit",
]
