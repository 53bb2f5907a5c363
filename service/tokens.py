"""Bearer tokens: random secrets shown once, stored as SHA-256 digests with their scopes."""

from __future__ import annotations

import hashlib
import os
import secrets
from enum import StrEnum
from pathlib import Path

import psycopg

TOKEN_BYTES = 32


class Scope(StrEnum):
    READ = "read"
    CURATE = "curate"
    ADMIN = "admin"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    conn: psycopg.Connection[tuple[object, ...]], name: str, scopes: list[Scope]
) -> str:
    """Register a new token and return its secret; only the digest is stored."""
    token = "qry_" + secrets.token_urlsafe(TOKEN_BYTES)
    conn.execute(
        "INSERT INTO api_tokens (name, token_sha256, scopes) VALUES (%s, %s, %s)",
        (name, digest(token), [str(scope) for scope in scopes]),
    )
    return token


def ensure_admin_token(conn: psycopg.Connection[tuple[object, ...]], path: Path) -> str:
    """The local admin token of this state folder: read from ``path`` (mode 0600), or created
    and written there. Re-registered if the database no longer knows it."""
    if path.exists():
        token = path.read_text().strip()
        known = conn.execute(
            "SELECT 1 FROM api_tokens WHERE token_sha256 = %s AND revoked_at IS NULL",
            (digest(token),),
        ).fetchone()
        if known is None:
            conn.execute(
                "INSERT INTO api_tokens (name, token_sha256, scopes) VALUES (%s, %s, %s)",
                ("local-admin", digest(token), list(Scope)),
            )
        return token
    token = create_token(conn, "local-admin", list(Scope))
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    return token
