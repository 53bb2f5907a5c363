"""Type mapping: Postgres column types to the DuckDB types the warehouse describes columns by."""

from __future__ import annotations

import re

_PG_SCALARS: dict[str, str] = {
    "uuid": "UUID",
    "text": "VARCHAR",
    "name": "VARCHAR",
    "citext": "VARCHAR",
    "bigint": "BIGINT",
    "integer": "INTEGER",
    "smallint": "SMALLINT",
    "oid": "UBIGINT",
    "double precision": "DOUBLE",
    "real": "FLOAT",
    "boolean": "BOOLEAN",
    "timestamp with time zone": "TIMESTAMPTZ",
    "timestamp without time zone": "TIMESTAMP",
    "date": "DATE",
    "json": "JSON",
    "jsonb": "JSON",
    "bytea": "BLOB",
    # Unconstrained numeric has no exact DuckDB counterpart; DuckDB's own Postgres scanner
    # makes the same choice.
    "numeric": "DOUBLE",
}
_VARCHAR_LIKE = re.compile(r"^(character varying|character|bit varying|bit)(\(\d+\))?$")
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")


def duckdb_type(pg_type: str) -> str:
    """The DuckDB type that holds a Postgres column type (``format_type`` spelling).

    Types Quarry does not know are kept as their Postgres text form (``VARCHAR``).
    """
    if pg_type.endswith("[]"):
        return duckdb_type(pg_type[:-2]) + "[]"
    if pg_type in _PG_SCALARS:
        return _PG_SCALARS[pg_type]
    if _VARCHAR_LIKE.match(pg_type):
        return "VARCHAR"
    numeric = _NUMERIC.match(pg_type)
    if numeric:
        precision, scale = int(numeric.group(1)), int(numeric.group(2))
        return f"DECIMAL({precision},{scale})" if precision <= 38 else "DOUBLE"
    if pg_type.startswith("timestamp") and "with time zone" in pg_type:
        return "TIMESTAMPTZ"
    return "VARCHAR"


def is_list(duck_type: str) -> bool:
    return duck_type.endswith("[]")
