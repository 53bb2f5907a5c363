"""Bearer tokens: random secrets shown once, stored as SHA-256 digests with their scopes.

Tokens are managed directly in the operational database (``quarry tokens``): whoever can
reach it as its owner is an administrator already, and it works while the service is down.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg

TOKEN_BYTES = 32
TOKEN_PREFIX = "qry_"  # noqa: S105 (a prefix that marks Quarry tokens, not a secret)
LOCAL_ADMIN = "local-admin"


class Scope(StrEnum):
    """What a token may do; each scope implies the ones before it (read < curate < admin)."""

    READ = "read"
    CURATE = "curate"
    ADMIN = "admin"


@dataclass(frozen=True)
class TokenInfo:
    """A registered token, without its secret."""

    id: int
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "scopes": list(self.scopes),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    conn: psycopg.Connection[tuple[object, ...]], name: str, scopes: list[Scope]
) -> str:
    """Register a new token and return its secret; only the digest is stored."""
    return issue_token(conn, name, scopes)[1]


def issue_token(
    conn: psycopg.Connection[tuple[object, ...]], name: str, scopes: list[Scope]
) -> tuple[TokenInfo, str]:
    """Register a new token; its record and its secret (shown once, never stored)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    row = conn.execute(
        "INSERT INTO api_tokens (name, token_sha256, scopes) VALUES (%s, %s, %s) "
        "RETURNING id, name, scopes, created_at, revoked_at",
        (name, digest(token), [str(scope) for scope in scopes]),
    ).fetchone()
    assert row is not None  # INSERT ... RETURNING always returns the row
    return _info(row), token


def list_tokens(
    conn: psycopg.Connection[tuple[object, ...]], *, include_revoked: bool = False
) -> list[TokenInfo]:
    """Registered tokens, oldest first."""
    rows = conn.execute(
        "SELECT id, name, scopes, created_at, revoked_at FROM api_tokens "
        "WHERE %s OR revoked_at IS NULL ORDER BY id",
        (include_revoked,),
    ).fetchall()
    return [_info(row) for row in rows]


def revoke_token(conn: psycopg.Connection[tuple[object, ...]], token_id: int) -> TokenInfo | None:
    """Revoke a token by ID (idempotent); ``None`` when there is no such token."""
    row = conn.execute(
        "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = %s "
        "RETURNING id, name, scopes, created_at, revoked_at",
        (token_id,),
    ).fetchone()
    return _info(row) if row is not None else None


def ensure_admin_token(conn: psycopg.Connection[tuple[object, ...]], path: Path) -> str:
    """The local admin token of this state folder: read from ``path`` (mode 0600), or created
    and written there. Re-registered if the database no longer knows it; replaced by a new one
    if it was revoked (revoking the local admin token rotates it at the next ``quarry up``)."""
    if path.exists():
        token = path.read_text().strip()
        row = conn.execute(
            "SELECT revoked_at FROM api_tokens WHERE token_sha256 = %s", (digest(token),)
        ).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO api_tokens (name, token_sha256, scopes) VALUES (%s, %s, %s)",
                (LOCAL_ADMIN, digest(token), list(Scope)),
            )
        if row is None or row[0] is None:
            return token
    token = create_token(conn, LOCAL_ADMIN, list(Scope))
    temp = path.with_suffix(".tmp")
    temp.unlink(missing_ok=True)
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    temp.replace(path)
    return token


def _info(row: tuple[Any, ...]) -> TokenInfo:
    return TokenInfo(int(row[0]), str(row[1]), tuple(row[2]), row[3], row[4])
