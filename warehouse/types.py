"""Type mapping: Postgres column types to DuckDB types, DuckDB types to Arrow staging types."""

from __future__ import annotations

import re

import pyarrow as pa

from warehouse.errors import SchemaError

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
_DECIMAL = re.compile(r"^DECIMAL\((\d+),(\d+)\)$")

_ARROW: dict[str, pa.DataType] = {
    "UUID": pa.string(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "SMALLINT": pa.int16(),
    "UBIGINT": pa.uint64(),
    "DOUBLE": pa.float64(),
    "FLOAT": pa.float32(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP": pa.timestamp("us"),
    "DATE": pa.date32(),
    "BLOB": pa.binary(),
}


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


def arrow_type(duck_type: str) -> pa.DataType:
    """The Arrow type a staged value of DuckDB type ``duck_type`` travels in."""
    if duck_type.endswith("[]"):
        return pa.list_(arrow_type(duck_type[:-2]))
    if duck_type in _ARROW:
        return _ARROW[duck_type]
    decimal = _DECIMAL.match(duck_type.replace(" ", ""))
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    raise SchemaError(f"no Arrow staging type for DuckDB type {duck_type}", type=duck_type)


def is_list(duck_type: str) -> bool:
    return duck_type.endswith("[]")
