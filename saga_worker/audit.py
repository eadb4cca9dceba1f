"""The audit trail: who condemned a run and why, who approved or denied what, how each unwind ended.

The journal keeps it append-only, per run (docs/reference/approvals.md). Rows are written by the actions
themselves, in the same transaction where the action has one (the tombstone, an approval), so the
trail can never claim an action that did not happen. Dry runs write nothing, so they are not in it.
"""

from __future__ import annotations

import functools
import getpass
import re
from dataclasses import asdict
from typing import Any

from .display import neutral
from .errors import InvalidInputError
from .journal.parts import AuditPart
from .journal.records import AuditRecord, AuditVia
from .keys import check_run_id, shown
from .settings import get_settings
from .storable import check_storable_text

ACTOR_MAX = 200
# A reason is a sentence or a paragraph a person typed. It is stored with the tombstone's audit row
# and with each unwind, sent in the task's message and shown on every page: a cap keeps all of those
# small (a 1 MB reason used to be stored twice).
REASON_MAX = 2_000
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# An actor is a name on one line: no control character at all (a newline would forge a second line
# of the trail), no bidi control (it would show another name). A reason may hold newlines and tabs,
# and the bidi marks of right-to-left text, but no other control character and no override.
_NOT_IN_ACTOR = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
_NOT_IN_REASON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def default_actor() -> str:
    """The actor named when a caller names none: ``SAGA_ACTOR``, else the OS user (checked as any
    actor is: a ``SAGA_ACTOR`` with a control character is refused, naming the setting)."""
    configured = get_settings().actor
    if configured is None:
        user = _os_user()
        return user if _NOT_IN_ACTOR.search(user) is None and 0 < len(user) <= ACTOR_MAX else "unknown"
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


def check_actor(actor: object) -> str:
    """A name for the audit trail: 1-200 characters on one line, no control or bidi character."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_MAX:
        raise InvalidInputError(
            f"actor must be a non-empty name of at most {ACTOR_MAX} characters, got {shown(actor)}"
        )
    found = _NOT_IN_ACTOR.search(actor)
    if found is not None:
        raise InvalidInputError(
            f"actor {shown(actor)} holds the control character {neutral(found.group())} at index "
            f"{found.start()}: a name is one line of plain text; nothing was written"
        )
    return check_storable_text(actor.strip(), "actor")


def check_reason(reason: object) -> str:
    """Why, for the audit trail: at most ``REASON_MAX`` characters; newlines and tabs allowed, no other
    control character and no bidi override."""
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise InvalidInputError(f"reason must be a string, got {type(reason).__name__}")
    if len(reason) > REASON_MAX:
        raise InvalidInputError(
            f"reason is {len(reason)} characters, at most {REASON_MAX}: say why in a paragraph; nothing "
            "was written"
        )
    found = _NOT_IN_REASON.search(reason)
    if found is not None:
        raise InvalidInputError(
            f"reason holds the control character {neutral(found.group())} at index {found.start()} (only "
            "newlines and tabs are allowed); nothing was written"
        )
    return check_storable_text(reason, "reason")


def check_via(via: object) -> AuditVia:
    try:
        return AuditVia(via)
    except ValueError:
        known = ", ".join(v.value for v in AuditVia)
        raise InvalidInputError(f"via must be one of {known}, got {via!r}") from None


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
    "ACTOR_MAX",
    "REASON_MAX",
    "audit_dict",
    "check_actor",
    "check_reason",
    "default_actor",
    "read_audit",
]
