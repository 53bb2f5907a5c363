"""The ClickHouse backend's schema: database names, SQL files, types, views' tables.

``sql/warehouse/clickhouse/`` holds numbered forward-only migrations and a re-appliable
``views.sql`` (the same ledger rules as DuckLake's, :mod:`warehouse.sqlfiles`). ClickHouse runs one
statement per call, so a file is split on its semicolons (sqlglot's tokenizer, which knows
quotes and comments); ``${mirror}``, ``${meta}`` and ``${views}`` in a file are the
warehouse's databases.

Column types: each mirrored column is described with its DuckDB type (what staging, the
Debezium decoder and DuckLake speak); its ClickHouse type follows from it. ``String`` holds
VARCHAR, JSON and BLOB alike, so JSON and BLOB columns carry their type in the column comment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template

import sqlglot
from clickhouse_connect.driver.client import Client
from sqlglot import TokenType, exp

from warehouse.changes import TableSpec
from warehouse.errors import SchemaError
from warehouse.sqlfiles import SQL_ROOT, SqlFile, pending, sql_files
from warehouse.types import duckdb_type

SQL_DIR = SQL_ROOT / "clickhouse"
DIALECT = "clickhouse"
LIVE_PREFIX = "live_"  # ${meta}.live_<table>: a mirrored table's rows at a snapshot
UTC = "UTC"
#: A minmax skip index on ``_commit``: commits are numbered in insert order, so each part holds
#: a narrow range and a lookup of one commit's rows reads only the parts it wrote.
COMMIT_INDEX = "INDEX commit_idx _commit TYPE minmax GRANULARITY 1"

_SCALARS: dict[str, str] = {
    "UUID": "UUID",
    "VARCHAR": "String",
    "JSON": "String",
    "BLOB": "String",
    "BIGINT": "Int64",
    "INTEGER": "Int32",
    "SMALLINT": "Int16",
    "UBIGINT": "UInt64",
    "DOUBLE": "Float64",
    "FLOAT": "Float32",
    "BOOLEAN": "Bool",
    "TIMESTAMPTZ": f"DateTime64(6, '{UTC}')",
    "TIMESTAMP": "DateTime64(6)",
    "DATE": "Date32",
}
_BACK: dict[str, str] = {
    "UUID": "UUID",
    "String": "VARCHAR",
    "Int64": "BIGINT",
    "Int32": "INTEGER",
    "Int16": "SMALLINT",
    "UInt64": "UBIGINT",
    "Float64": "DOUBLE",
    "Float32": "FLOAT",
    "Bool": "BOOLEAN",
    f"DateTime64(6, '{UTC}')": "TIMESTAMPTZ",
    "DateTime64(6)": "TIMESTAMP",
    "Date32": "DATE",
}
_COMMENTED = frozenset({"JSON", "BLOB"})
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
_CH_DECIMAL = re.compile(r"^Decimal\((\d+),\s*(\d+)\)$")
_WRAPPER = re.compile(r"^(Nullable|LowCardinality)\((.*)\)$")


@dataclass(frozen=True)
class Databases:
    """The warehouse's databases: curation views, mirrored tables, metadata."""

    views: str
    mirror: str
    meta: str

    @classmethod
    def of(cls, database: str) -> Databases:
        return cls(database, f"{database}_mirror", f"{database}_meta")

    def ident(self, database: str, name: str) -> str:
        """``database.name``, both quoted."""
        return f"{quote(database)}.{quote(name)}"


def quote(name: str) -> str:
    """``name`` as a quoted ClickHouse identifier."""
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)


def clickhouse_type(duck_type: str, *, key: bool = False) -> str:
    """The ClickHouse column type that holds DuckDB type ``duck_type`` (key columns are never
    NULL; other columns are Nullable, arrays hold Nullable elements)."""
    if duck_type.endswith("[]"):
        return f"Array({clickhouse_type(duck_type[:-2])})"
    decimal = _DECIMAL.match(duck_type)
    base = f"Decimal({decimal[1]}, {decimal[2]})" if decimal else _SCALARS.get(duck_type)
    if base is None:
        raise SchemaError(f"no ClickHouse type for DuckDB type {duck_type}", type=duck_type)
    return base if key else f"Nullable({base})"


def duck_type_of(ch_type: str, comment: str = "") -> str:
    """The DuckDB type of a mirrored column from its ClickHouse type and comment."""
    wrapped = _WRAPPER.match(ch_type)
    if wrapped:
        return duck_type_of(wrapped[2], comment)
    if ch_type.startswith("Array(") and ch_type.endswith(")"):
        return duck_type_of(ch_type[6:-1]) + "[]"
    if comment in _COMMENTED and ch_type == "String":
        return comment
    decimal = _CH_DECIMAL.match(ch_type)
    if decimal:
        return f"DECIMAL({decimal[1]},{decimal[2]})"
    if ch_type in _BACK:
        return _BACK[ch_type]
    raise SchemaError(f"mirrored column type {ch_type} has no DuckDB counterpart", type=ch_type)


def column_definition(name: str, duck_type: str, *, key: bool = False) -> str:
    """A column of a mirrored table, with its type comment where ``String`` is ambiguous."""
    text = f"{quote(name)} {clickhouse_type(duck_type, key=key)}"
    if duck_type in _COMMENTED:
        text += f" COMMENT {exp.Literal.string(duck_type).sql(dialect=DIALECT)}"
    return text


def render_file(item: SqlFile, names: Databases) -> list[str]:
    """The statements of one SQL file, with the database names filled in."""
    text = Template(item.text).substitute(
        mirror=quote(names.mirror), meta=quote(names.meta), views=quote(names.views)
    )
    return split_statements(text)


def split_statements(text: str) -> list[str]:
    """``text`` cut at its top-level semicolons (not those inside quotes or comments)."""
    cuts = [
        token.end
        for token in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
        if token.token_type == TokenType.SEMICOLON
    ]
    parts, start = [], 0
    for end in [*cuts, len(text)]:
        parts.append(text[start:end].strip())
        start = end + 1
    return [part for part in parts if part and not _only_comments(part)]


def _only_comments(part: str) -> bool:
    return all(line.strip().startswith("--") or not line.strip() for line in part.splitlines())


def pending_files(folder: Path, applied: Mapping[str, str]) -> list[SqlFile]:
    """The files of ``folder`` to run given the ledger (name -> SHA-256)."""
    return pending(sql_files(folder), dict(applied))


def view_tables(view_sql: Mapping[str, str], names: Databases) -> dict[str, frozenset[str]]:
    """Each view's mirrored tables, from its SQL: ``${meta}.live_<t>(...)`` reads table
    ``t``, and so does ``${mirror}.t``."""
    tables: dict[str, frozenset[str]] = {}
    for view, sql in view_sql.items():
        tree = sqlglot.parse_one(sql, read=DIALECT)
        tables[view] = frozenset(_mirrored(tree.find_all(exp.Table), names))
    return tables


def _mirrored(tables: Iterable[exp.Table], names: Databases) -> Iterable[str]:
    for table in tables:
        database, called = table.db, table.name
        if isinstance(table.this, exp.Anonymous):
            # ClickHouse stores a view call as `db.view`(...): one quoted name
            database, _, called = table.this.name.rpartition(".")
            database = database or table.db
        if database == names.meta and called.startswith(LIVE_PREFIX):
            yield called.removeprefix(LIVE_PREFIX)
        elif database == names.mirror:
            yield called


def create_table_statement(target: str, spec: TableSpec) -> str:
    """A new mirrored table: the source's columns, the version columns, ordered by key."""
    if not spec.key:
        raise SchemaError(
            f"table {spec.name!r} has no primary key or replica identity "
            "index; give it one to mirror it",
            table=spec.name,
        )
    columns = [
        column_definition(c.name, duckdb_type(c.pg_type), key=c.name in spec.key)
        for c in spec.columns
    ]
    columns += ["_lsn UInt64", "_seq Int32", "_deleted Bool", "_commit UInt64", COMMIT_INDEX]
    order = ", ".join([*(quote(k) for k in spec.key), "_lsn", "_seq"])
    return (
        f"CREATE TABLE IF NOT EXISTS {target} ({', '.join(columns)}) "
        f"ENGINE = MergeTree ORDER BY ({order})"
    )


def apply_sql_files(client: Client, names: Databases, folder: Path) -> list[str]:
    """Run the pending files of ``folder`` and record each in ``<meta>.applied_sql``;
    returns their names. Not atomic (ClickHouse has no transactions): every statement of a
    file can run again, and a file is recorded only once all of it ran."""
    meta = quote(names.meta)
    client.command(f"CREATE DATABASE IF NOT EXISTS {meta}")
    client.command(
        f"CREATE TABLE IF NOT EXISTS {meta}.applied_sql (name String, sha256 String, "
        "applied_at DateTime64(6, 'UTC') DEFAULT now64(6)) "
        "ENGINE = MergeTree ORDER BY (name, applied_at)"
    )
    applied = client.query(
        f"SELECT name, argMax(sha256, applied_at) FROM {meta}.applied_sql GROUP BY name"
    ).result_rows
    todo = pending_files(folder, {str(n): str(d) for n, d in applied})
    for item in todo:
        for statement in render_file(item, names):
            client.command(statement)
        client.insert(
            "applied_sql",
            [[item.name, item.sha256]],
            column_names=["name", "sha256"],
            database=names.meta,
        )
    return [item.name for item in todo]
