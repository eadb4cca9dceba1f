"""Text from the journal, made safe to show a person (docs/cli/index.md: control and bidi characters
neutralised).

What the journal holds was typed by people and raised by providers: an escape sequence in a reason
(``\\x1b]0;…`` retitles a terminal, ``\\x1b[2J`` clears it, ``\\r`` overwrites the line) or a bidi
override in an actor (``\\u202e`` shows text reversed) would act on the operator's terminal or page
instead of being read. Every such character is shown as its escape (``\\x1b``, ``\\u202e``), so what
is on screen is what is stored, spelled out. The CLI applies this to every value it prints (and
prints them without markup), the console to every value its pages render.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls; the bidi marks, embeddings, overrides and isolates; the Unicode
# line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_UNSAFE_KEEPING_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutral(text: object, *, lines: bool = False) -> str:
    """``text`` (any value, as ``str``) with every control and bidi character shown as its escape;
    with ``lines``, newlines and tabs are kept (a multi-line reason in a table cell)."""
    value = "" if text is None else str(text)
    return (_UNSAFE_KEEPING_LINES if lines else _UNSAFE).sub(_escape, value)


__all__ = ["neutral"]
