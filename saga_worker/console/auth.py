"""Who is asking: bearer tokens from ``SAGA_CONSOLE_TOKENS``, each with a name and a role.

A token is kept at rest as its SHA-256 (``name:role:sha256:<hex>``); the console compares digests
in constant time and never holds, prints or logs a token itself. A browser logs in once with its
token and gets a server-side session (``security.Sessions``): a random id in an HttpOnly,
SameSite=Strict cookie, with its own CSRF secret its forms send back. Programs send
``Authorization: Bearer <token>`` (no cookie, so no CSRF token needed).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import Enum

from ..errors import SagaError

COOKIE = "saga_console"
_NAME = re.compile(r"^[A-Za-z0-9_.@\-]{1,64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class Role(str, Enum):
    VIEWER = "viewer"  # reads runs, plans (dry runs) and metrics
    OPERATOR = "operator"  # also compensates, re-drives, approves and denies


class ConsoleConfigError(SagaError):
    """The console's tokens are missing or malformed: it refuses to serve anything."""


@dataclass(frozen=True)
class Principal:
    name: str  # the actor recorded with every action
    role: Role
    digest: str  # SHA-256 of the token, hex

    @property
    def can_act(self) -> bool:
        return self.role is Role.OPERATOR


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(name: str, role: Role) -> tuple[str, str]:
    """A fresh token and its ``SAGA_CONSOLE_TOKENS`` entry (which holds only the digest)."""
    if not _NAME.match(name):
        raise ConsoleConfigError(f"token name {name!r}: use 1-64 letters, digits, '_', '.', '@' or '-'")
    token = secrets.token_urlsafe(32)
    return token, f"{name}:{role.value}:sha256:{digest(token)}"


def parse_tokens(spec: str) -> dict[str, Principal]:
    """``name:role:sha256:<hex>`` entries, comma-separated, by digest. Errors name the entry by its
    position and name only: the rest of the entry may be a secret."""
    found: dict[str, Principal] = {}
    names: set[str] = set()
    for position, raw in enumerate((e.strip() for e in spec.split(",")), 1):
        if not raw:
            continue
        parts = raw.split(":")
        name = parts[0]
        if len(parts) != 4 or parts[2] != "sha256" or not _HEX64.match(parts[3]):
            raise ConsoleConfigError(
                f"SAGA_CONSOLE_TOKENS entry {position} must look like 'name:role:sha256:<64 hex digits>' "
                "(make one with `saga-worker token NAME --role operator`)"
            )
        if not _NAME.match(name):
            raise ConsoleConfigError(f"SAGA_CONSOLE_TOKENS entry {position}: bad token name")
        try:
            role = Role(parts[1])
        except ValueError:
            raise ConsoleConfigError(
                f"SAGA_CONSOLE_TOKENS entry {position} ({name}): role must be viewer or operator"
            ) from None
        if name in names:
            raise ConsoleConfigError(f"SAGA_CONSOLE_TOKENS: the name {name!r} is used twice")
        names.add(name)
        found[parts[3]] = Principal(name, role, parts[3])
    if not found:
        raise ConsoleConfigError("SAGA_CONSOLE_TOKENS holds no token: the console serves nothing without one")
    return found


class Tokens:
    """The configured tokens; ``who(token)`` is the principal of a presented token, or None."""

    def __init__(self, spec: str | None) -> None:
        if not spec:
            raise ConsoleConfigError(
                "SAGA_CONSOLE_TOKENS is not set: the console serves nothing without tokens "
                "(make one with `saga-worker token NAME --role operator`)"
            )
        self._by_digest = parse_tokens(spec)

    def who(self, token: str | None) -> Principal | None:
        if not token or len(token) > 512:
            return None
        presented = digest(token)
        found = None
        for known, principal in self._by_digest.items():  # constant time per known token
            if hmac.compare_digest(presented, known):
                found = principal
        return found

    def by_digest(self, known: str) -> Principal | None:
        """The principal a session was opened for, if its token is still configured."""
        return self._by_digest.get(known)
