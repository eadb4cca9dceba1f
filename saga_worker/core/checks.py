"""Every check of input at the boundary, in one place: identifiers that go into idempotency keys
(run, tool and call ids), unwind ids, steps named in a message, ``dry_run``, the audit trail's
actor, reason and ``via``, and text a journal stores. Each returns the value it accepts and raises InvalidInputError, writing
nothing, for one it refuses; an error shows at most the start of a refused value (``shown``).

(Tools are checked where they are defined: ``tools.check_tools``.)
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, TypeVar

from ..errors import InvalidInputError
from .display import neutral
from .storable import text_problem

E = TypeVar("E", bound=Enum)

# ":" separates the parts of a key and "-" the parts of an args suffix; an id holding either part
# separator in the wrong place would make two different calls share one key.
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$")
_CALL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


SHOWN_MAX = 60  # characters of a refused id an error shows: an id from a message may be a megabyte


def shown(value: object) -> str:
    """``repr`` of a refused value for an error message, at most ~60 characters of it (and its length)."""
    if isinstance(value, str) and len(value) > SHOWN_MAX:
        return f"{value[:SHOWN_MAX]!r}… ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * SHOWN_MAX else f"{text[: 2 * SHOWN_MAX]}… ({type(value).__name__})"


def clipped(value: object) -> object:
    """A refused value as an error's ``detail`` holds it: as given, or its first ~60 characters."""
    return f"{value[:SHOWN_MAX]}…" if isinstance(value, str) and len(value) > SHOWN_MAX else value


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or len(run_id) > 200 or not _RUN_ID.match(run_id):
        raise InvalidInputError(
            f"run id {shown(run_id)} cannot be used in idempotency keys: use 1-200 characters of letters, "
            "digits, '_', '.', '-', starting with a letter or digit (':' separates key parts)",
            run_id=clipped(run_id),
        )
    return run_id


def check_tool_name(name: object) -> str:
    if not isinstance(name, str) or len(name) > 100 or not _TOOL_NAME.match(name):
        raise InvalidInputError(
            f"tool name {shown(name)} cannot be used in idempotency keys: use 1-100 characters of letters, "
            "digits, '_' and '.', starting with a letter or '_' (':' and '-' separate key parts)",
            tool_name=clipped(name),
        )
    return name


def check_call_id(call_id: object) -> str:
    if (
        not isinstance(call_id, str)
        or len(call_id) > 200
        or not _CALL_ID.match(call_id)
        or call_id.startswith("args-")
    ):
        raise InvalidInputError(
            f"tool call id {shown(call_id)} cannot be used in idempotency keys: use 1-200 characters of "
            "letters, digits, '_', '.', '-', not starting with 'args-'",
            tool_call_id=clipped(call_id),
        )
    return call_id


UNWIND_ID_MAX = 200  # the journal's unwind id column (saga_unwinds.unwind_id)


def check_unwind_id(unwind_id: object) -> str:
    """An unwind id (a Celery task id) must fit its column and be plain text: checked before the
    tombstone, so a bad one is refused rather than condemning the run and then failing to record."""
    if (
        not isinstance(unwind_id, str)
        or not 1 <= len(unwind_id) <= UNWIND_ID_MAX
        or not unwind_id.isprintable()
    ):
        shown = unwind_id[:40] + "…" if isinstance(unwind_id, str) and len(unwind_id) > 40 else unwind_id
        size = f" ({len(unwind_id)} characters)" if isinstance(unwind_id, str) else ""
        raise InvalidInputError(
            f"unwind id {shown!r}{size} cannot be recorded: use 1-{UNWIND_ID_MAX} printable characters "
            "(a Celery task id is used as the unwind id)",
            unwind_id=shown,
        )
    return unwind_id


SUFFIX_MAX = 300  # the journal's step columns (saga_tool_records.suffix, saga_compensations.suffix)


def check_step_suffix(suffix: object) -> str:
    """A step's name in a step message (its call id, or ``args-<tool>-<hash>``): text a journal can
    look up, checked before it is read, so a NUL or a megabyte is refused here naming the step, never
    by the database's driver in its own words."""
    if not isinstance(suffix, str) or not 1 <= len(suffix) <= SUFFIX_MAX or not suffix.isprintable():
        raise InvalidInputError(
            f"step {shown(suffix)} cannot be in a journal: a step's name is 1-{SUFFIX_MAX} printable "
            "characters (its call id, or args-<tool>-<hash>); nothing was done",
            suffix=clipped(suffix),
        )
    return suffix


def check_dry_run(dry_run: object) -> bool:
    """``dry_run`` decides between a plan and an irreversible unwind: only a real boolean may decide it
    (a JSON ``false``, not ``None``, ``0``, ``""`` or the text ``"false"``)."""
    if not isinstance(dry_run, bool):
        raise InvalidInputError(
            f"dry_run must be true or false (a JSON boolean), got {type(dry_run).__name__} {dry_run!r}; "
            "nothing was written",
            dry_run=repr(dry_run),
        )
    return dry_run


_GROUP = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def check_group(group: object) -> str:
    """A group token a caller names (a Celery group's id): what the journal's ``group`` column holds."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise InvalidInputError(
            f"group {shown(group)} cannot name a group of calls: use 1-64 characters of letters, digits, "
            "'_', '.', ':', '-'",
            group=clipped(group),
        )
    return group


def check_parallel(parallel: object) -> bool:
    """``parallel`` chooses how an unwind runs its groups: a real boolean only, as ``dry_run``."""
    if not isinstance(parallel, bool):
        raise InvalidInputError(
            f"parallel must be true or false (a JSON boolean), got {type(parallel).__name__} {parallel!r}; "
            "nothing was written",
            parallel=repr(parallel),
        )
    return parallel


# -- the audit trail's words -------------------------------------------------------------------

ACTOR_MAX = 200
# A reason is a sentence or a paragraph a person typed. It is stored with the tombstone's audit row
# and with each unwind, sent in the task's message and shown on every page: a cap keeps all of those
# small (a 1 MB reason used to be stored twice).
REASON_MAX = 2_000
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# An actor is a name on one line: no control character at all (a newline would forge a second line
# of the trail), no bidi control (it would show another name). A reason may hold newlines and tabs,
# and the bidi marks of right-to-left text, but no other control character and no override.
NOT_IN_ACTOR = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
_NOT_IN_REASON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def check_actor(actor: object) -> str:
    """A name for the audit trail: 1-200 characters on one line, no control or bidi character."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_MAX:
        raise InvalidInputError(
            f"actor must be a non-empty name of at most {ACTOR_MAX} characters, got {shown(actor)}"
        )
    found = NOT_IN_ACTOR.search(actor)
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


def check_choice(value: object, kind: type[E], name: str) -> E:
    """One of an enumeration's values (``via`` of the audit trail: ``compensation.actors.check_via``)."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(v.value) for v in kind)
        raise InvalidInputError(f"{name} must be one of {known}, got {value!r}") from None


def check_storable_text(value: object, field: str, **detail: Any) -> str:
    """``value`` if it is text a journal can store; InvalidInputError naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be text, got {type(value).__name__}", **detail)
    problem = text_problem(value)
    if problem is not None:
        raise InvalidInputError(f"{field} cannot be stored: {problem}; nothing was written", **detail)
    return value


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def check_age(age: object, name: str = "--older-than") -> float:
    """An age such as ``90d``, ``12h``, ``30m``, ``45s`` or ``2w``, in seconds (more than zero)."""
    match = _AGE.match(age) if isinstance(age, str) else None
    seconds = float(match.group(1)) * _AGE_UNITS[match.group(2)] if match else 0.0
    if seconds <= 0:
        raise InvalidInputError(
            f"{name} must be an age such as 90d, 12h, 30m, 45s or 2w, got {shown(age)}", value=clipped(age)
        )
    return seconds
