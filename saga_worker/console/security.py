"""What keeps the console to the people it is for (from loopback too: any local process can reach it).

- ``Sessions``: a browser's login is an HttpOnly cookie signed with SAGA_CONSOLE_SECRET: the
  token's digest, the session's own CSRF secret and its expiry. Every console process sharing the
  secret reads it (several processes, restarts). The cookie never carries the token, and the CSRF
  secret cannot be computed from the configuration.
- ``LoginLimiter``: failed logins (a wrong token in the form or in ``Authorization``) per client
  address and per credential; past the limit a wrong token waits out the window (429), a valid one
  is never refused.
- In front of everything (``app.create_app`` stacks them): secure's ``SecureASGIMiddleware`` with
  ``HEADERS`` (a CSP without inline script, ``frame-ancestors 'none'``, ``nosniff``,
  ``Referrer-Policy``, ``Cache-Control: no-store``); ``ForwardedHost`` and uvicorn's ``ProxyHeadersMiddleware`` (only the
  configured proxies' ``X-Forwarded-Host``/``-Proto``/``-For`` are believed); Starlette's
  ``TrustedHostMiddleware`` (a ``Host`` the console is not configured for is refused: DNS
  rebinding); ``SameOrigin`` (a POST from another origin is refused, login and logout included).
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from itsdangerous import BadData, URLSafeSerializer
from secure import (
    CacheControl,
    ContentSecurityPolicy,
    CrossOriginOpenerPolicy,
    ReferrerPolicy,
    Secure,
    XContentTypeOptions,
    XFrameOptions,
)
from starlette.types import ASGIApp, Receive, Scope, Send

from .auth import Principal

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOGIN_WINDOW_S = 300.0
MAX_SESSIONS = 10_000
# The headers on every answer, refusals and static files included (secure's ASGI middleware sets them).
# Same-origin (not no-referrer): with no-referrer a browser sends ``Origin: null`` on a form's POST.
HEADERS = Secure(
    csp=ContentSecurityPolicy()
    .default_src("'self'")
    .script_src("'self'")
    .style_src("'self'")
    .img_src("'self'", "data:")
    .connect_src("'self'")
    .form_action("'self'")
    .frame_ancestors("'none'")
    .base_uri("'none'")
    .object_src("'none'"),
    xcto=XContentTypeOptions(),
    xfo=XFrameOptions().deny(),
    referrer=ReferrerPolicy().set("same-origin"),
    coop=CrossOriginOpenerPolicy().set("same-origin"),
    cache=CacheControl().no_store(),
)


# -- sessions -----------------------------------------------------------------------------------------

SECRET_MIN = 32


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str  # this session's own CSRF secret, sent back by its forms
    expires_at: float  # time.time(): every console process reads the same clock
    session_id: str


class Signer:
    """Signed JSON, one key per purpose (a session cookie cannot pass for a notice): itsdangerous's
    serializer (HMAC-SHA256, the purpose as its salt), with the expiry ``e`` (a time.time()) signed
    inside the data."""

    def __init__(self, secret: str) -> None:
        self._secret = secret
        self._serializers: dict[str, URLSafeSerializer] = {}

    def _for(self, purpose: str) -> URLSafeSerializer:
        serializer = self._serializers.get(purpose)
        if serializer is None:
            serializer = self._serializers[purpose] = URLSafeSerializer(
                self._secret, salt=purpose, signer_kwargs={"digest_method": hashlib.sha256}
            )
        return serializer

    def sign(self, purpose: str, data: dict[str, Any]) -> str:
        return self._for(purpose).dumps(data)

    def unsign(self, purpose: str, value: str | None, limit: int = 4096) -> dict[str, Any] | None:
        """The signed data, or None for anything not signed by this key for this purpose, or expired."""
        if not value or len(value) > limit:
            return None
        try:
            data = self._for(purpose).loads(value)
        except BadData:
            return None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("e"), int | float)
            or data["e"] <= time.time()
        ):
            return None
        return data


def console_secret(secret: str | None, *, embedded: bool) -> str:
    """The key that signs sessions: SAGA_CONSOLE_SECRET, or in the embedded default (one process, one
    machine) a fresh one per start. Elsewhere a missing or short key refuses to start: two processes
    with keys of their own would each refuse the other's logins."""
    from .auth import ConsoleConfigError

    if secret is None:
        if embedded:
            return secrets.token_urlsafe(32)
        raise ConsoleConfigError(
            "SAGA_CONSOLE_SECRET is not set: every console process of a deployment signs its session "
            "cookies with it (make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`); "
            "only the embedded default (no SAGA_BROKER_URL) runs without one"
        )
    if len(secret) < SECRET_MIN:
        raise ConsoleConfigError(f"SAGA_CONSOLE_SECRET must be at least {SECRET_MIN} characters long")
    return secret


class Sessions:
    """Logins as signed, expiring cookies: the principal's token digest, a CSRF secret of the session's
    own and the expiry, signed with the console's secret. Any console process with the same secret
    reads them, and a restart keeps them. Logout clears the browser's cookie and revokes its id in
    this process; a copy replayed to another process stays valid until it expires (remove the token
    from SAGA_CONSOLE_TOKENS, or change SAGA_CONSOLE_SECRET, to end every session at once)."""

    PURPOSE = "saga-console-session"

    def __init__(self, ttl: float, signer: Signer, limit: int = MAX_SESSIONS) -> None:
        self.ttl = ttl
        self._signer = signer
        self._limit = limit
        self._revoked: dict[str, float] = {}  # session id -> its expiry
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> tuple[str, Session]:
        session = Session(
            principal, secrets.token_urlsafe(32), time.time() + self.ttl, secrets.token_urlsafe(16)
        )
        cookie = self._signer.sign(
            self.PURPOSE,
            {"p": principal.digest, "c": session.csrf, "e": session.expires_at, "i": session.session_id},
        )
        return cookie, session

    def get(self, cookie: str | None, principal_of: Callable[[str], Principal | None]) -> Session | None:
        data = self._signer.unsign(self.PURPOSE, cookie)
        if data is None or not all(isinstance(data.get(k), str) for k in ("p", "c", "i")):
            return None
        with self._lock:
            if data["i"] in self._revoked:
                return None
        principal = principal_of(data["p"])
        if principal is None:  # its token was removed from SAGA_CONSOLE_TOKENS
            return None
        return Session(principal, data["c"], float(data["e"]), data["i"])

    def close(self, cookie: str | None) -> None:
        data = self._signer.unsign(self.PURPOSE, cookie)
        if data is None or not isinstance(data.get("i"), str):
            return
        now = time.time()
        with self._lock:
            for sid in [s for s, e in self._revoked.items() if e <= now]:
                del self._revoked[sid]
            if len(self._revoked) < self._limit:
                self._revoked[data["i"]] = float(data["e"])


# -- failed logins ------------------------------------------------------------------------------------


class _Failures:
    """At most ``attempts`` failures per key in a sliding ``window`` of seconds."""

    def __init__(self, attempts: int, window: float) -> None:
        self.attempts = attempts
        self.window = window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(key)
            if failures is None:
                return 0.0
            while failures and failures[0] <= now - self.window:
                failures.popleft()
            if not failures:
                del self._failures[key]
                return 0.0
            return max(0.0, failures[0] + self.window - now) if len(failures) >= self.attempts else 0.0

    def failed(self, key: str) -> None:
        with self._lock:
            if len(self._failures) > MAX_SESSIONS:  # bounded: forget the quietest keys
                self._failures.clear()
            self._failures.setdefault(key, deque(maxlen=self.attempts)).append(time.monotonic())


class LoginLimiter:
    """Failed logins, counted per client address and per credential presented (its digest, never
    the credential): past ``attempts`` in ``window`` seconds on either, a wrong credential is answered
    429. It limits guessing, never a valid token: everyone behind one proxy or container gateway
    shares an address, and a guesser there must not lock out the operators or the metrics scrape.
    The two counts are kept apart so that spraying credentials cannot wipe the address's count."""

    def __init__(self, attempts: int, window: float = LOGIN_WINDOW_S) -> None:
        self._clients = _Failures(attempts, window)
        self._credentials = _Failures(attempts, window)

    def wait(self, client: str, credential: str) -> float:
        """Seconds before a wrong ``credential`` from ``client`` is answered 401 again (0: now)."""
        return max(self._clients.wait(client), self._credentials.wait(_credential_key(credential)))

    def failed(self, client: str, credential: str) -> None:
        self._clients.failed(client)
        self._credentials.failed(_credential_key(credential))


def _credential_key(credential: str) -> str:
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()


# -- proxies, hosts, origins --------------------------------------------------------------------------


def parse_networks(spec: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``10.0.0.0/8, 192.0.2.1`` as networks; a malformed entry is a configuration error (uvicorn's
    ``ProxyHeadersMiddleware`` would take it silently as a literal that matches nothing)."""
    from .auth import ConsoleConfigError

    found = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        try:
            found.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConsoleConfigError(
                f"SAGA_CONSOLE_TRUSTED_PROXIES: {entry[:60]!r} is not an address or a network"
            ) from None
    return tuple(found)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _host_pattern(host: str) -> str:
    """A host as Starlette's ``TrustedHostMiddleware`` compares it: an IPv6 address in brackets."""
    try:
        return f"[{host.strip('[]')}]" if ipaddress.ip_address(host.strip("[]")).version == 6 else host
    except ValueError:
        return host


@dataclass(frozen=True)
class Network:
    """Who may say what about a request: the trusted proxies, the allowed hosts. The scheme and the
    client's address are read from the scope, which uvicorn's ``ProxyHeadersMiddleware`` has set from
    a trusted proxy's ``X-Forwarded-Proto``/``-For``."""

    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    allowed_hosts: tuple[str, ...]  # lower case, IPv6 in brackets; "*.example.com" allows its subdomains

    @classmethod
    def configure(cls, *, allowed_hosts: str, bind_host: str, trusted_proxies: str) -> Network:
        hosts = [*LOOPBACK_HOSTS, *(h.strip().lower() for h in allowed_hosts.split(",") if h.strip())]
        if bind_host and bind_host not in ("0.0.0.0", "::"):
            hosts.append(bind_host.lower())
        return cls(parse_networks(trusted_proxies), tuple(dict.fromkeys(map(_host_pattern, hosts))))

    @property
    def proxies_spec(self) -> list[str]:
        return [str(network) for network in self.trusted_proxies]

    def peer_trusted(self, scope: Scope) -> bool:
        peer = (scope.get("client") or ("", 0))[0]
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted_proxies)

    def is_https(self, scope: Scope) -> bool:
        return scope.get("scheme") == "https"

    def client(self, scope: Scope) -> str:
        return str((scope.get("client") or ("unknown", 0))[0])


class ForwardedHost:
    """A trusted proxy that rewrites ``Host`` to the console's own address says in ``X-Forwarded-Host``
    what the browser asked for: that becomes the ``Host`` the host check and the Origin check read.
    Hand-written: uvicorn's ``ProxyHeadersMiddleware`` reads only ``X-Forwarded-Proto``/``-For``, and
    test_cookies_are_secure_behind_a_trusted_tls_proxy_and_only_then needs ``X-Forwarded-Host``. It
    runs before that middleware, which replaces the peer's address with the forwarded client's."""

    def __init__(self, app: ASGIApp, *, network: Network) -> None:
        self.app = app
        self.network = network

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded = _header(scope, b"x-forwarded-host") if scope["type"] == "http" else None
        if forwarded and self.network.peer_trusted(scope):
            headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
            headers.append((b"host", forwarded.split(",")[0].strip().encode("latin-1")))
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)


def cross_origin(scope: Scope) -> bool:
    """An unsafe request another site sent: its Origin is not the ``Host`` (or is ``null``), or,
    without one, the browser says it is cross-site. A program that sends neither (curl, a script) is
    not."""
    origin = _header(scope, b"origin")
    if origin is not None:
        if origin.strip().lower() == "null":
            return True
        netloc = urlsplit(origin.strip()).netloc.lower()
        return not netloc or netloc != (_header(scope, b"host") or "").strip().lower()
    return (_header(scope, b"sec-fetch-site") or "").lower() in ("cross-site", "same-site")


Refusal = Callable[[Scope, int, str], Awaitable[Any]]  # (scope, status, message) -> an ASGI app


class SameOrigin:
    """Refuses (403) a POST from another origin, login and logout included.
    Hand-written: Starlette has no Origin check, and a CSRF token cannot cover the login form (a
    stranger has no session yet), which test_every_post_from_another_origin_is_refused_login_and_logout_included
    needs refused."""

    def __init__(self, app: ASGIApp, *, refuse: Refusal) -> None:
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in UNSAFE_METHODS and cross_origin(scope):
            answer = await self.refuse(scope, 403, "a request from another site is refused")
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


# -- what the console says about itself ----------------------------------------------------------------


def journal_summary(url: str) -> str:
    """What an operator needs to know of the journal's URL: its kind and host, nothing else (no user,
    password, database name or query)."""
    scheme, sep, rest = url.partition("://")
    kind = scheme.split("+", 1)[0].lower() if sep else "unknown"
    if not kind.isalnum():
        kind = "unknown"
    if kind == "sqlite":
        return "sqlite · a file on the console's host"
    # A password may hold '/', '?' or '#' unencoded: the host follows the last '@'.
    host = rest[rest.rfind("@") + 1 :].split("/", 1)[0].split("?", 1)[0]
    if not host or not all(c.isalnum() or c in ".-:[]_" for c in host):
        host = "(host not shown)"
    return f"{kind} · {host}"


def plain_http_warning(host: str) -> str | None:
    """A warning when the console binds where other machines reach it over plain HTTP."""
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass
    return (
        f"the console listens on {host} over plain HTTP: tokens and session cookies cross the network "
        "in clear. Put it behind a TLS proxy (SAGA_CONSOLE_TRUSTED_PROXIES names it) or bind 127.0.0.1."
    )
