"""What the journal can store, decided at the boundary where values come from user code.

Two kinds of characters a journal may not hold: NUL (PostgreSQL's text refuses it) and lone
surrogates (``"\\ud800"`` alone is not Unicode text at all: it has no UTF-8 form, so neither SQLite
nor PostgreSQL can take it, and canonical JSON of it cannot be hashed). Python strings hold both,
and an exception raised by a hook carries whatever text a provider sent.

- Error text (what a hook raised, a planner's ``Finish.error``) is never refused: refusing it would
  turn a recorded failure into a crash inside the error path. It is stored with those characters
  escaped (``\\x00``, ``\\udXXX``) and a note saying so (``storable_text``).
- Values (inputs, outputs, prompts) are refused with an error naming the field and where in the
  value the character is (``text_problem``, ``surrogate_path``): a value stored altered would replay
  as another value. JSON escapes NUL itself (``\\u0000``), so in a JSON value only lone surrogates
  are unstorable.
"""

from __future__ import annotations

import re
from typing import Any

ESCAPED_NOTE = "[NUL and lone surrogates escaped]"

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\x00" if char == "\x00" else f"\\u{ord(char):04x}"


def storable_text(text: str) -> str:
    """``text`` as a journal can store it: unchanged if it can, else escaped and marked.

    Idempotent (escaped text holds no unstorable character), so applying it twice is harmless."""
    if _UNSTORABLE.search(text) is None:
        return text
    return f"{_UNSTORABLE.sub(_escape, text)} {ESCAPED_NOTE}"


def storable_or_none(text: str | None) -> str | None:
    """``storable_text`` for a journal's optional text columns (errors, notes): the last line of
    defence, so a path that forgot to escape cannot fail the write that records a failure."""
    return None if text is None else storable_text(text)


# An error text from user code is kept up to this many characters: its head and its tail, with a note
# saying how much was cut between them. It is stored with the step, shown in every report, logged and
# sent back through the result backend: a hook that raises a megabyte must not make each of those a
# megabyte.
ERROR_TEXT_MAX = 8_000
_ERROR_TAIL = 2_000


def bounded_error(text: str) -> str:
    """``text`` if it is at most ``ERROR_TEXT_MAX`` characters; else its head and tail, and how much was cut."""
    if len(text) <= ERROR_TEXT_MAX:
        return text
    head = ERROR_TEXT_MAX - _ERROR_TAIL
    return f"{text[:head]} … [{len(text) - ERROR_TEXT_MAX} characters cut] … {text[-_ERROR_TAIL:]}"


def exception_text(exc: BaseException) -> str:
    """``"Type: message"`` for an exception raised by user code, always storable, at most
    ``ERROR_TEXT_MAX`` characters (with a note).

    A ``__str__`` that raises still gets a description rather than a crash in the error path."""
    try:
        message = str(exc)
    except Exception as inner:  # noqa: BLE001 - any failure of user code here must not escape
        message = f"<str() of the exception raised {type(inner).__name__}>"
    return storable_text(bounded_error(f"{type(exc).__name__}: {message}"))


def text_problem(text: str) -> str | None:
    """Why a journal cannot store ``text`` as given, or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"it holds a NUL character at index {found.start()}, which the journal cannot store"
    return f"it holds {_surrogate_words(found.group())} at index {found.start()}"


def has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def surrogate_problem(value: Any) -> str:
    """Where a JSON value holds a lone surrogate, in words (the JSON path of the first one)."""
    path, char = _find_surrogate(value, "$")
    if path is None:
        return "it holds a lone surrogate, which is not valid Unicode and cannot be stored"
    return f"the string at {path} holds {_surrogate_words(char)}"


def _surrogate_words(char: str) -> str:
    return f"a lone surrogate (\\u{ord(char):04x}), which is not valid Unicode and cannot be stored"


def _find_surrogate(value: Any, path: str) -> tuple[str | None, str]:
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return (path, found.group()) if found else (None, "")
    items: list[tuple[Any, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found = _SURROGATE.search(key) if isinstance(key, str) else None
            if found:
                return f"{path} (a key)", found.group()
            items.append((item, f"{path}.{key}"))
    elif isinstance(value, list | tuple):
        items = [(item, f"{path}[{index}]") for index, item in enumerate(value)]
    for item, where in items:
        hit = _find_surrogate(item, where)
        if hit[0] is not None:
            return hit
    return None, ""
