"""Bearer-token authentication: a token's SHA-256 digest is looked up with its scopes.

Lookups are cached per process for ``ttl_s`` seconds (``service.token_cache_s``, 5 s by
default), so a request does not open a Postgres connection when its token was seen recently;
a revoked token therefore keeps working for at most ``ttl_s`` seconds. Unknown tokens are not
cached (a token created a moment ago works at once), and at most a few lookups run at a time,
so a flood of bad tokens cannot use up the database's connections.

A JWT from ``POST /v1/auth/authenticate`` (``service/sink_auth.py``) is accepted wherever a
token is: its signature is checked, then the token it names is looked up like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg
from anyio import to_thread

from service.errors import DatabaseUnavailableError, ForbiddenError, UnauthorizedError
from service.sink_auth import JwtIssuer, is_jwt
from service.tokens import Scope, digest

REALM = "quarry"
# admin implies curate implies read.
_IMPLIED = {
    Scope.READ: {Scope.READ, Scope.CURATE, Scope.ADMIN},
    Scope.CURATE: {Scope.CURATE, Scope.ADMIN},
    Scope.ADMIN: {Scope.ADMIN},
}


@dataclass(frozen=True)
class Principal:
    """Who is calling, by token name, and what they may do."""

    name: str
    scopes: frozenset[Scope]

    def require(self, scope: Scope) -> None:
        if not _IMPLIED[scope] & self.scopes:
            raise ForbiddenError(f"this token lacks the {scope!s} scope", scope=str(scope))


def lookup_principal(conn: psycopg.Connection[Any], token: str) -> Principal | None:
    """The principal of a live (not revoked) token, or ``None``."""
    return lookup_digest(conn, digest(token))


def lookup_digest(conn: psycopg.Connection[Any], token_sha256: str) -> Principal | None:
    """The principal of the live token whose SHA-256 hex digest is ``token_sha256``."""
    row = conn.execute(
        "SELECT name, scopes FROM api_tokens WHERE token_sha256 = %s AND revoked_at IS NULL",
        (token_sha256,),
    ).fetchone()
    if row is None:
        return None
    known = {str(scope) for scope in Scope}
    return Principal(row[0], frozenset(Scope(s) for s in row[1] if s in known))


def challenge(error: Exception) -> str | None:
    """The ``WWW-Authenticate`` value (RFC 6750) of a 401 or 403, else ``None``."""
    if isinstance(error, UnauthorizedError):
        reason = error.context.get("error")
        return f'Bearer realm="{REALM}"' + (f', error="{reason}"' if reason else "")
    if isinstance(error, ForbiddenError):
        scope = error.context.get("scope", "")
        return f'Bearer realm="{REALM}", error="insufficient_scope", scope="{scope}"'
    return None


class TokenCache:
    """Authenticates bearer tokens, remembering known ones for ``ttl_s`` seconds.

    Used from the event loop only; the database lookup runs in a worker thread.

    :param connect: opens a connection to the operational database (closed after use).
    :param ttl_s: seconds a known token is trusted without asking the database again.
    :param max_entries: tokens remembered at most (the oldest are forgotten first).
    :param lookups: database lookups that may run at the same time.
    :param jwt: checks JWTs (``None``: a JWT is refused as unknown).
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        ttl_s: float,
        *,
        max_entries: int = 4096,
        lookups: int = 4,
        jwt: JwtIssuer | None = None,
    ) -> None:
        self._connect = connect
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._lookups = lookups
        self.jwt = jwt
        self._limiter: anyio.CapacityLimiter | None = None
        self._entries: dict[str, tuple[float, Principal]] = {}

    async def authenticate(self, token: str | None) -> Principal:
        """The principal of ``token``; :class:`UnauthorizedError` when there is none."""
        if not token:
            raise UnauthorizedError("send Authorization: Bearer <token> (see `quarry tokens`)")
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._lookups)
        principal = await to_thread.run_sync(self._lookup, key, limiter=self._limiter)
        if principal is None:
            self._entries.pop(key, None)
            raise UnauthorizedError("unknown or revoked token", error="invalid_token")
        self._remember(key, principal)
        return principal

    def _key(self, token: str) -> str:
        """The digest a token is looked up by: its own, or the one a valid JWT names."""
        if not is_jwt(token):
            return digest(token)
        if self.jwt is None:
            raise UnauthorizedError(
                "JWTs are not enabled on this service (set QUARRY_SERVICE__JWT_SECRET)",
                error="invalid_token",
            )
        return self.jwt.digest_of(token)

    def _lookup(self, key: str) -> Principal | None:
        try:
            with self._connect() as conn:
                return lookup_digest(conn, key)
        except psycopg.OperationalError as error:
            raise DatabaseUnavailableError(
                f"cannot check the token: the operational database is unavailable ({error})",
                part="postgres",
            ) from error

    def _remember(self, key: str, principal: Principal) -> None:
        now = time.monotonic()
        if len(self._entries) >= self._max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
            while len(self._entries) >= self._max_entries:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = (now + self._ttl_s, principal)
