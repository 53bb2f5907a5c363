"""The source database: pinned sessions, preflight checks, what the publication holds.

Every session the follower opens pins the settings that fix the text form of values
(:data:`cdc.values.SESSION_OPTIONS`), because pgoutput sends values as text.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from cdc.config import CdcConfig
from cdc.errors import PreflightError, SourceUnavailableError
from cdc.values import SESSION_OPTIONS
from warehouse.changes import ColumnSpec, TableSpec

Connection = psycopg.Connection[tuple[Any, ...]]

_PUBLICATION_TABLES = """
SELECT c.oid, n.nspname, c.relname,
       pg_relation_size(c.oid) / current_setting('block_size')::int AS pages
FROM pg_publication_tables AS pt
JOIN pg_namespace AS n ON n.nspname = pt.schemaname
JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = %s
ORDER BY n.nspname, c.relname
"""
_COLUMNS = """
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped
ORDER BY attnum
"""
# The replica identity index when the table names one, else the primary key.
_KEY = """
SELECT a.attname
FROM (SELECT indexrelid, indrelid, indkey FROM pg_index
      WHERE indrelid = %s AND (indisreplident OR indisprimary)
      ORDER BY indisreplident DESC LIMIT 1) AS i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k (attnum, ord)
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
ORDER BY k.ord
"""


def connect(dsn: str, *, replication: bool = False) -> Connection:
    """An autocommit session on the source with the pinned settings."""
    extra: dict[str, Any] = {"replication": "database"} if replication else {}
    try:
        return psycopg.connect(
            dsn, autocommit=True, options=SESSION_OPTIONS, application_name="quarry-cdc", **extra
        )
    except psycopg.OperationalError as error:
        raise SourceUnavailableError(f"cannot connect to the source database: {error}") from error


def preflight(conn: Connection, config: CdcConfig) -> None:
    """Refuse to start, with what to do, when logical replication cannot work as configured."""
    level = _one(conn, "SELECT current_setting('wal_level')")
    if level != "logical":
        raise PreflightError(
            f"wal_level is {level!r}: set wal_level = logical in "
            "postgresql.conf and restart PostgreSQL",
            wal_level=level,
        )
    if int(_one(conn, "SELECT current_setting('max_replication_slots')::int")) < 1:
        raise PreflightError(
            "max_replication_slots is 0: set it to at least 1 and restart PostgreSQL"
        )
    allowed = _one(
        conn, "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    )
    if not allowed:
        raise PreflightError(
            "the CDC user lacks the REPLICATION attribute: ALTER ROLE <user> REPLICATION"
        )
    if (
        _one(conn, "SELECT count(*) FROM pg_publication WHERE pubname = %s", (config.publication,))
        == 0
    ):
        database = _one(conn, "SELECT current_database()")
        raise PreflightError(
            f"publication {config.publication!r} does not exist in database {database!r}: "
            f"CREATE PUBLICATION {config.publication} FOR TABLE ... (Quarry's migrations in "
            "sql/postgres/ create it)",
            publication=config.publication,
            database=database,
        )
    _check_reports(conn)


def _check_reports(conn: Connection) -> None:
    """The follower reports its liveness into ``cdc_writers`` (migration 0004)."""
    if _one(conn, "SELECT to_regclass('cdc_writers') IS NULL"):
        database = _one(conn, "SELECT current_database()")
        raise PreflightError(
            f"table cdc_writers does not exist in database {database!r}: apply Quarry's "
            "migrations (sql/postgres/, `quarry up` does) to the source database",
            database=database,
        )
    if not _one(conn, "SELECT has_table_privilege('cdc_writers', 'INSERT, UPDATE')"):
        raise PreflightError(
            "the CDC user may not write table cdc_writers, where the follower reports its "
            "liveness: GRANT INSERT, UPDATE ON cdc_writers TO <user>"
        )


def _one(conn: Connection, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def publication_tables(conn: Connection, publication: str) -> list[tuple[TableSpec, int, int]]:
    """Each published table's spec, its oid and its size in pages."""
    tables = []
    for oid, namespace, name, pages in conn.execute(_PUBLICATION_TABLES, (publication,)):
        tables.append((table_spec(conn, int(oid), namespace, name), int(oid), int(pages)))
    return tables


def warehouse_table(namespace: str, name: str) -> str:
    """Name of the mirrored table of ``namespace.name`` (schema ``public`` is implied)."""
    return name if namespace == "public" else f"{namespace}__{name}"


def table_spec(conn: Connection, oid: int, namespace: str, name: str) -> TableSpec:
    """A table's current columns (``format_type`` spelling) and key, from the catalog."""
    columns = tuple(ColumnSpec(str(n), str(t)) for n, t in conn.execute(_COLUMNS, (oid,)))
    return TableSpec(warehouse_table(namespace, name), columns, table_key(conn, oid))


def table_key(conn: Connection, oid: int) -> tuple[str, ...]:
    """The columns of the table's replica identity index, else of its primary key; empty
    when it has neither."""
    return tuple(str(n) for (n,) in conn.execute(_KEY, (oid,)))


def qualified(namespace: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(namespace), sql.Identifier(name))
