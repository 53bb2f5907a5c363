"""The embedded Postgres starts, migrates, stops and restarts with its data intact."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

import quarry.stack.postgres as postgres_module
from quarry.errors import ConfigError
from quarry.stack.migrations import apply_migrations, discover
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.postgres import SQL_DIR


def test_wal_level_is_logical(pg_conn: psycopg.Connection[tuple[object, ...]]) -> None:
    assert pg_conn.execute("SHOW wal_level").fetchone() == ("logical",)


def test_migrated_schema_has_publication(pg_conn: psycopg.Connection[tuple[object, ...]]) -> None:
    tables = pg_conn.execute(
        "SELECT tablename FROM pg_publication_tables WHERE pubname = 'quarry_cdc'"
    ).fetchall()
    assert {"episodes", "episode_stats", "manifests"} <= {t for (t,) in tables}
    # Lineage lives in the warehouse (migration 0007): no row per episode through CDC.
    assert not {"manifest_episodes", "manifest_episodes_legacy"} & {t for (t,) in tables}


def test_migrations_are_idempotent(pg_dsn: str) -> None:
    assert apply_migrations(pg_dsn, SQL_DIR) == []


def test_edited_migration_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    for migration in discover(SQL_DIR):
        (tmp_path / migration.path.name).write_text(migration.path.read_text() + "\n-- edit\n")
    with pytest.raises(ConfigError, match="changed after it was applied"):
        apply_migrations(pg_dsn, tmp_path)


def test_badly_named_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "init.sql").write_text("SELECT 1")
    with pytest.raises(ConfigError, match=r"0001_name\.sql"):
        discover(tmp_path)


def _started(tmp_path: Path) -> EmbeddedPostgres:
    """A new server with its state under ``tmp_path``, started (the caller stops it)."""
    paths = StatePaths.at(tmp_path / "state")
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    return server


def test_restart_keeps_data(tmp_path: Path) -> None:
    server = _started(tmp_path)
    try:
        with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        server.stop()
        assert not server.is_running()
        server.start()
        with psycopg.connect(server.dsn("postgres")) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [(42,)]
    finally:
        server.stop()


def test_starts_from_binaries_inside_a_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout in a private folder (``mktemp -d`` makes them 0700) holds the Postgres
    binaries in its virtual environment; run as root, the server's own user must still
    reach them (the failure was "Permission denied: .../pginstall/bin/initdb")."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    # The wheel's layout: site-packages/pgserver/pginstall, its libraries in pgserver.libs.
    site = postgres_module._bin("initdb").parents[3]
    install = private / "site-packages" / "pgserver" / "pginstall"
    shutil.copytree(site / "pgserver" / "pginstall", install, symlinks=True)
    shutil.copytree(site / "pgserver.libs", install.parents[1] / "pgserver.libs")
    monkeypatch.setattr(postgres_module, "_bin", lambda name: install / "bin" / name)
    server = _started(tmp_path)
    try:
        with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchall() == [(1,)]
    finally:
        server.stop()
