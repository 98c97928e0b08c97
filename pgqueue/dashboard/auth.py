"""Who may act: the dashboard is read-only unless it was given an admin token.

With a token, a request that changes anything needs it: scripts send `Authorization: Bearer
TOKEN`; people log in once with a form that sets a signed session cookie (HttpOnly,
SameSite=Strict), and every form they post carries a CSRF token derived from that cookie,
which another site cannot read. Posts whose Origin is another site are refused outright.
The token itself is never stored in a cookie, logged or echoed: sessions are HMACs keyed by
a hash of it, so changing the token ends every session. Logging out revokes the session on the
server too (a saved copy of the cookie no longer acts): the dashboard process keeps the
sessions logged out until they would have expired. Behind several dashboard processes, each
knows only its own logouts: change the token to end every session at once.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import Request

SESSION_COOKIE = "pgqueue_session"
#: How long a login lasts.
SESSION_SECONDS = 12 * 3600
#: The shortest admin token accepted (a guessable token would make the login form the weak spot).
MIN_TOKEN_LENGTH = 16
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True)
class Denied:
    """Why a request may not act: its HTTP status and a message for the caller."""

    status: int
    message: str


READ_ONLY = Denied(403, "this dashboard is read-only: start it with an admin token "
                        "(--admin-token-file FILE or PGQUEUE_ADMIN_TOKEN) to act on jobs")


def check_token(token: str | None) -> str | None:
    """The admin token, checked (None: read-only)."""
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"admin_token must be a str or None, got {type(token).__name__}")
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"admin_token must be at least {MIN_TOKEN_LENGTH} characters "
                         f"(got {len(token)}); make one with `openssl rand -hex 24`")
    return token


class Auth:
    """The dashboard's admin token (or none) and the sessions and CSRF tokens made from it."""

    def __init__(self, token: str | None) -> None:
        token = check_token(token)
        self.read_only = token is None
        self._digest = hashlib.sha256((token or "").encode()).digest()
        self._key = hashlib.sha256(b"pgqueue-dashboard-session:" + self._digest).digest()
        #: sessions logged out, by nonce: when each would have expired anyway
        self._revoked: dict[str, float] = {}
        self._revoked_lock = threading.Lock()

    def token_matches(self, given: str) -> bool:
        """Whether `given` is the admin token (in constant time)."""
        if self.read_only:
            return False
        return hmac.compare_digest(hashlib.sha256(given.strip().encode()).digest(), self._digest)

    def _sign(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        """A session cookie value: when it was issued, a nonce, and their signature."""
        body = f"{int(time.time())}.{secrets.token_hex(16)}"
        return f"{body}.{self._sign(body)}"

    def session_ok(self, value: str | None) -> bool:
        """Whether a cookie value is a live session of this token."""
        if self.read_only or not value or value.count(".") != 2:
            return False
        issued, nonce, signature = value.split(".")
        if not _same(self._sign(f"{issued}.{nonce}"), signature):
            return False
        if nonce in self._revoked:
            return False
        return issued.isdigit() and time.time() - int(issued) < SESSION_SECONDS

    def revoke(self, value: str | None) -> None:
        """Log a session out for good: its cookie, kept by anyone, no longer acts."""
        if not self.session_ok(value):
            return
        assert value is not None
        issued, nonce, _ = value.split(".")
        now = time.time()
        with self._revoked_lock:
            self._revoked = {n: t for n, t in self._revoked.items() if t > now}  # expired: gone
            self._revoked[nonce] = int(issued) + SESSION_SECONDS

    def session(self, request: Request) -> str | None:
        """The request's live session cookie, if it has one."""
        value = request.cookies.get(SESSION_COOKIE)
        return value if self.session_ok(value) else None

    def csrf(self, request: Request) -> str:
        """The CSRF token forms of this session carry ("" without a session)."""
        session = self.session(request)
        return "" if session is None else self._sign(f"csrf:{session}")

    def logged_in(self, request: Request) -> bool:
        return self.session(request) is not None

    def denied(self, request: Request, form_csrf: str | None = None) -> Denied | None:
        """Why `request` may not act (None: it may)."""
        if self.read_only:
            return READ_ONLY
        if not same_origin(request):
            return Denied(403, "cross-site request refused (its Origin is another site)")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":  # another scheme (a proxy's Basic) is not ours: a session may act
            if self.token_matches(given):
                return None
            return Denied(401, "wrong admin token (send Authorization: Bearer TOKEN)")
        session = self.session(request)
        if session is None:
            return Denied(401, "log in with the admin token (or send Authorization: Bearer TOKEN)")
        given_csrf = request.headers.get(CSRF_HEADER) or form_csrf or ""
        if not _same(given_csrf, self._sign(f"csrf:{session}")):
            return Denied(403, "missing or stale CSRF token: reload the page and try again")
        return None


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a client's string with ours (any characters: compared as
    UTF-8, since compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8"))


def same_origin(request: Request) -> bool:
    """False when the request says it comes from another origin (no Origin header: a script,
    or a browser that does not send one for this request; such posts still need the token)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin == f"{request.url.scheme}://{request.url.netloc}"
