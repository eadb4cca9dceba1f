"""Who asks for an action and through what: the actor named when a caller names none and the checked
``via`` of the audit trail. The unwind engine names both, so they live below the operator's modules
that also use them (approvals, actions, the CLI)."""

from __future__ import annotations

import functools
import getpass

from ..core.checks import ACTOR_MAX, NOT_IN_ACTOR, check_actor, check_choice
from ..errors import InvalidInputError
from ..journal.records import AuditVia
from ..settings import get_settings


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
