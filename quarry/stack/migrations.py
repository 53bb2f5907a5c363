"""Forward-only migrations of the operational database from ``sql/postgres/NNNN_name.sql``.

Each file runs once, in its own transaction, in file-name order. Its SHA-256 is recorded, and a
file that changed after it was applied is refused: released migrations are never edited.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from quarry.errors import ConfigError

_FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    sha256      text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(folder: Path) -> list[Migration]:
    """The migrations in ``folder``, sorted by version; refuses unnumbered or duplicate files."""
    found: dict[int, Migration] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise ConfigError(f"migration file name must look like 0001_name.sql: {path}")
        version = int(match.group(1))
        if version in found:
            raise ConfigError(f"two migrations with version {version}: {path}")
        found[version] = Migration(version, path.stem, path)
    return [found[v] for v in sorted(found)]


def apply_migrations(conninfo: str, folder: Path) -> list[int]:
    """Apply every pending migration; return the versions applied now."""
    applied_now: list[int] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(_LEDGER)
        rows = conn.execute("SELECT version, sha256 FROM schema_migrations").fetchall()
        done = {int(version): str(digest) for version, digest in rows}
        for migration in discover(folder):
            if migration.version in done:
                _check_unchanged(migration, done[migration.version])
                continue
            with conn.transaction():
                conn.execute(migration.path.read_text())
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.sha256),
                )
            applied_now.append(migration.version)
    return applied_now


def _check_unchanged(migration: Migration, recorded_sha256: str) -> None:
    if migration.sha256 != recorded_sha256:
        raise ConfigError(
            f"migration {migration.path.name} changed after it was applied; add a new numbered "
            "migration instead of editing a released one",
            version=migration.version,
        )
