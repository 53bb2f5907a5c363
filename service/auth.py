"""Bearer-token authentication: a token's digest is looked up with its scopes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from service.errors import ForbiddenError, UnauthorizedError
from service.tokens import Scope, digest


@dataclass(frozen=True)
class Principal:
    """Who is calling, by token name, and what they may do."""

    name: str
    scopes: frozenset[Scope]

    def require(self, scope: Scope) -> None:
        # admin implies curate implies read.
        implied = {
            Scope.READ: {Scope.READ, Scope.CURATE, Scope.ADMIN},
            Scope.CURATE: {Scope.CURATE, Scope.ADMIN},
            Scope.ADMIN: {Scope.ADMIN},
        }
        if not implied[scope] & self.scopes:
            raise ForbiddenError(f"this token lacks the {scope!s} scope", scope=str(scope))


def authenticate(conn: psycopg.Connection[Any], authorization: str | None) -> Principal:
    """The principal of an ``Authorization: Bearer <token>`` header."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise UnauthorizedError("send Authorization: Bearer <token> (see `quarry tokens create`)")
    token = authorization[len("bearer ") :].strip()
    row = conn.execute(
        "SELECT name, scopes FROM api_tokens WHERE token_sha256 = %s AND revoked_at IS NULL",
        (digest(token),),
    ).fetchone()
    if row is None:
        raise UnauthorizedError("unknown or revoked token")
    known = {str(scope) for scope in Scope}
    return Principal(row[0], frozenset(Scope(s) for s in row[1] if s in known))
