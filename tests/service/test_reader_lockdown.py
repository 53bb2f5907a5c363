"""The service's warehouse reader holds even when a query gets past the curation guard.

These tests call the reader directly, bypassing the guard: raw statements on a reader cursor
(bypassing also the reader's own single-SELECT check) and SELECTs through ``query_arrow``.
Every way out must fail in the engine: DuckDB's lockdown (no external access, files only
under the data path, locked configuration, memory limit, interruption) and the catalog
connection's SELECT-only, non-superuser Postgres role.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import duckdb
import psycopg
import pytest
from psycopg import errors

from quarry.stack.lifecycle import Stack
from quarry.stack.postgres import CATALOG_DB, READER_ROLE
from tests.fixtures.stack import CORPUS_EPISODES
from warehouse.ducklake.reader import LakeReader
from warehouse.errors import QueryError, QueryTimeoutError, RowLimitError

# DuckLake attaches its Postgres catalog under this name (the lake is attached as "wh").
CATALOG_ALIAS = "__ducklake_metadata_wh"


@pytest.fixture(scope="module")
def reader(corpus: Stack) -> Iterator[LakeReader]:
    lake = LakeReader(corpus.settings.warehouse_config())
    yield lake
    lake.close()


def execute(reader: LakeReader, sql: str) -> list[tuple[Any, ...]]:
    with reader.cursor() as cur:
        return cur.execute(sql).fetchall()


def pg_query(sql: str) -> str:
    quoted = sql.replace("'", "''")
    return f"SELECT * FROM postgres_query('{CATALOG_ALIAS}', '{quoted}')"


def test_reader_reads_the_lake_through_the_read_only_role(reader: LakeReader) -> None:
    # Tables DuckLake created after the role was set up (inlined data) are readable too.
    assert reader.query_arrow("SELECT count(*) AS n FROM episodes")["n"][0].as_py() == (
        CORPUS_EPISODES
    )
    user, superuser = execute(
        reader, pg_query("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
    )[0]
    assert (user, superuser) == (READER_ROLE, False)


def test_reader_settings_are_the_hardened_ones(reader: LakeReader, corpus: Stack) -> None:
    external, locked, allowed = execute(
        reader,
        "SELECT current_setting('enable_external_access'), "
        "current_setting('lock_configuration'), current_setting('allowed_directories')",
    )[0]
    assert external is False and locked is True
    assert str(corpus.paths.warehouse) + "/" in allowed


def escapes(stack_root: str, data_path: str, socket_dir: str) -> list[str]:
    """Raw statements that must fail: file and network access, configuration, extensions,
    writes to the lake and to the catalog, and the catalog server's files."""
    return [
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_text('{stack_root}/admin.token')",
        f"SELECT * FROM read_text('{data_path}/../admin.token')",
        f"SELECT * FROM read_text('{stack_root}/pg/postgresql.conf')",
        "SELECT * FROM read_text('/proc/self/environ')",
        "COPY (SELECT 1) TO '/tmp/quarry-escape.csv'",
        f"ATTACH 'dbname=quarry host={socket_dir} user=postgres' AS op (TYPE postgres)",
        "ATTACH '/tmp/quarry-escape.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "SET memory_limit = '1TB'",
        "SET lock_configuration = false",
        "RESET lock_configuration",
        "CREATE TABLE mirror.escape (i INTEGER)",
        "DELETE FROM mirror.episodes",
        "DROP VIEW episodes",
        "UPDATE mirror.robots SET site = 'x'",
        "CALL ducklake_flush_inlined_data('wh')",
        "SELECT * FROM ducklake_expire_snapshots('wh', older_than => now())",
        pg_query("SELECT pg_read_file('/etc/passwd')"),
        pg_query("SELECT pg_ls_dir('.')"),
        pg_query("SELECT lo_import('/etc/passwd')"),
        f"CALL postgres_execute('{CATALOG_ALIAS}', 'CREATE TABLE escape (i int)')",
        f"CALL postgres_execute('{CATALOG_ALIAS}', 'DELETE FROM ducklake_snapshot')",
    ]


def test_raw_statements_that_escape_are_refused_by_the_engine(
    reader: LakeReader, corpus: Stack
) -> None:
    paths = corpus.paths
    accepted = []
    for sql in escapes(str(paths.root), str(paths.warehouse), str(paths.socket_dir)):
        try:
            execute(reader, sql)
        except duckdb.Error:
            continue
        accepted.append(sql)
    assert accepted == []
    assert execute(reader, "SELECT 1") == [(1,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        "COPY (SELECT 1) TO '/tmp/quarry-escape.csv'",
        "SELECT 1; SELECT 2",
        pg_query("SELECT pg_read_file('/etc/passwd')"),
    ],
)
def test_guard_free_queries_that_escape_fail(reader: LakeReader, sql: str) -> None:
    with pytest.raises(QueryError):
        reader.query_arrow(sql)


def test_reader_cannot_open_a_superuser_connection(reader: LakeReader, corpus: Stack) -> None:
    dsn = f"host={corpus.paths.socket_dir} user=postgres dbname=quarry"
    with pytest.raises(QueryError):
        reader.query_arrow(f"SELECT * FROM postgres_scan('{dsn}', 'public', 'api_tokens')")


def test_reader_role_reaches_only_the_catalog(reader: LakeReader, corpus: Stack) -> None:
    dsn = f"host={corpus.paths.socket_dir} user=quarry_reader dbname=quarry"
    with pytest.raises(QueryError):
        reader.query_arrow(f"SELECT * FROM postgres_scan('{dsn}', 'public', 'episodes')")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT pg_ls_dir('.')",
        "SELECT lo_import('/etc/passwd')",
        "COPY ducklake_snapshot TO '/tmp/quarry-escape.csv'",
        "COPY (SELECT 1) TO PROGRAM 'true'",
        "CREATE TABLE escape (i int)",
        "DELETE FROM ducklake_snapshot",
        "UPDATE ducklake_metadata SET value = value",
        "INSERT INTO ducklake_snapshot SELECT * FROM ducklake_snapshot LIMIT 1",
        "TRUNCATE ducklake_snapshot",
        "SET ROLE postgres",
        "ALTER ROLE quarry_reader SUPERUSER",
        "CREATE EXTENSION vector",
        "CREATE FUNCTION escape() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    ],
)
def test_reader_role_cannot_write_or_reach_server_files(stack: Stack, statement: str) -> None:
    with (
        psycopg.connect(stack.postgres.dsn(CATALOG_DB, user=READER_ROLE)) as conn,
        pytest.raises((errors.InsufficientPrivilege, errors.UndefinedFile)),
    ):
        conn.execute(statement)


def test_reader_role_can_read_the_catalog(stack: Stack) -> None:
    with psycopg.connect(stack.postgres.dsn(CATALOG_DB, user=READER_ROLE)) as conn:
        assert conn.execute("SELECT count(*) FROM ducklake_snapshot").fetchone() is not None


def test_memory_limit_stops_a_query(corpus: Stack) -> None:
    config = corpus.settings.warehouse_config().model_copy(update={"reader_memory_limit": "64MB"})
    small = LakeReader(config)
    try:
        with pytest.raises(QueryError, match=r"(?i)memory"):
            small.query_arrow("SELECT length(list(range)) AS n FROM range(50000000)")
        assert small.query_arrow("SELECT count(*) AS n FROM episodes").num_rows == 1
    finally:
        small.close()


def test_runaway_query_is_interrupted(reader: LakeReader) -> None:
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError):
        reader.query_arrow(
            "SELECT count(*) FROM range(1000000000000) WHERE md5(CAST(range AS VARCHAR)) = 'x'",
            timeout_s=0.5,
        )
    assert time.monotonic() - started < 5
    assert reader.query_arrow("SELECT 1 AS one")["one"][0].as_py() == 1


def test_row_cap(reader: LakeReader) -> None:
    with pytest.raises(RowLimitError):
        reader.query_arrow("SELECT * FROM episode_stats", max_rows=3)
