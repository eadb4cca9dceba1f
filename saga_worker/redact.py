"""Hide secrets before text leaves the process: URL passwords in messages, pages and logs."""

from __future__ import annotations

import re

import sqlalchemy as sa

# scheme://user:password@host — the password part, in any URL-looking text (broker and result URLs
# are not all SQLAlchemy URLs, and they turn up inside error messages too).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<secret>[^@\s/]+)(?P<at>@)")


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``; otherwise as written."""
    try:
        parsed = sa.engine.make_url(url)
    except Exception:
        return redact_text(url)
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def redact_text(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with its password replaced by ``***``."""
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}***{m['at']}", text)
