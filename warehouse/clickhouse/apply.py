"""Writing staged rows into a ClickHouse mirror table: every version is kept, tagged with
the commit (snapshot) that wrote it.

The staged rows (:mod:`warehouse.rows`, snapshot chunks) go into a ``Memory`` table of their
own Arrow types, then one ``INSERT ... SELECT`` casts them to the mirror's types (Postgres
text the way DuckDB casts it: timestamps parsed, booleans from ``t``/``f``, arrays from JSON,
``bytea`` from hex), joins each to the stored newest version of its key and inserts it only
when its ``(_lsn, _seq)`` is newer: the LSN guard, so replays and re-deliveries add nothing.
``_keep`` columns take the stored value. Nothing is updated in place; readers pick the newest
version visible at their snapshot (``views.sql``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.client import Client
from sqlglot import exp

from warehouse.base import MirrorTable, known_table
from warehouse.changes import ChangeBatch
from warehouse.clickhouse.meta import STAGE_PREFIX
from warehouse.clickhouse.schema import DIALECT, Databases, clickhouse_type, quote
from warehouse.rows import KEEP
from warehouse.types import is_list

_STAGE_META = {"_lsn": "UInt64", "_seq": "Int32", "_deleted": "Bool", KEEP: "Array(String)"}
# How Postgres text becomes a value of a DuckDB type (DuckDB's own casts otherwise).
_TEXT_CASTS = {
    "TIMESTAMPTZ": "parseDateTime64BestEffort({}, 6, 'UTC')",
    "TIMESTAMP": "parseDateTime64BestEffort({}, 6, 'UTC')",
    "BLOB": "unhex({})",
}
_JOIN_SETTINGS = " SETTINGS join_use_nulls = 1"
_NEWER = "(s._lsn, s._seq) > (k._lsn, k._seq)"


def arrow_stage_type(kind: pa.DataType) -> str:
    """The ClickHouse column type that holds a staged Arrow column as it is."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"Array({arrow_stage_type(kind.value_type)})"
    if pa.types.is_timestamp(kind):
        digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[kind.unit]
        zone = ", 'UTC'" if kind.tz is not None else ""
        return f"Nullable(DateTime64({digits}{zone}))"
    if pa.types.is_decimal(kind):
        return f"Nullable(Decimal({kind.precision}, {kind.scale}))"
    simple = {
        pa.bool_(): "Bool",
        pa.date32(): "Date32",
        pa.float32(): "Float32",
        pa.float64(): "Float64",
    }
    if kind in simple:
        return f"Nullable({simple[kind]})"
    if pa.types.is_integer(kind):
        sign = "Int" if pa.types.is_signed_integer(kind) else "UInt"
        return f"Nullable({sign}{kind.bit_width})"
    return "Nullable(String)"  # text, binary, null


@contextmanager
def staged(client: Client, names: Databases, rows: pa.Table) -> Iterator[str]:
    """``rows`` in a fresh ``Memory`` table of the meta database (dropped afterwards); yields
    its quoted name."""
    name = f"{STAGE_PREFIX}{uuid.uuid4().hex}"
    target = names.ident(names.meta, name)
    columns = [
        f"{quote(f.name)} {_STAGE_META.get(f.name) or arrow_stage_type(f.type)}"
        for f in rows.schema
    ]
    if KEEP in rows.schema.names:
        empty = pa.scalar([], rows.schema.field(KEEP).type)
        index = rows.schema.get_field_index(KEEP)
        rows = rows.set_column(index, KEEP, pc.fill_null(rows.column(KEEP), empty))
    client.command(f"CREATE TABLE {target} ({', '.join(columns)}) ENGINE = Memory")
    try:
        client.insert_arrow(name, rows, database=names.meta)
        yield target
    finally:
        client.command(f"DROP TABLE IF EXISTS {target}")


def value_expression(name: str, duck_type: str, *, key: bool) -> str:
    """Staged column ``name`` of table ``b`` (Postgres text, :mod:`warehouse.rows`) cast to
    its mirror type, failing on a value that does not convert, as DuckDB does (ClickHouse's
    cast to a Nullable type would give NULL). ``if`` skips the NULLs: ClickHouse would
    otherwise convert their empty slots."""
    column = f"b.{quote(name)}"
    if is_list(duck_type):
        target = clickhouse_type(duck_type)
        return f"JSONExtract(ifNull({column}, 'null'), {_string(target)})"
    if key:
        return f"CAST({column} AS {clickhouse_type(duck_type, key=True)})"
    value = f"assumeNotNull({column})"
    template = _TEXT_CASTS.get(duck_type)
    cast = (
        template.format(value)
        if template
        else f"CAST({value} AS {clickhouse_type(duck_type, key=True)})"
    )
    return f"if(isNull({column}), NULL, {cast})"


def _string(text: str) -> str:
    return exp.Literal.string(text).sql(dialect=DIALECT)


def _columns(table: MirrorTable, rows: pa.Table) -> list[tuple[str, str]]:
    return [(n, t) for n, t in table.columns if n in rows.schema.names]


def _casts(table: MirrorTable, rows: pa.Table, only_key: bool = False) -> list[str]:
    return [
        f"{value_expression(n, t, key=n in table.key)} AS {quote(n)}"
        for n, t in _columns(table, rows)
        if not only_key or n in table.key
    ]


def latest_statement(target: str, key: Sequence[str], where: str = "") -> str:
    """The newest stored version of each key of ``target`` (tombstones included)."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"SELECT * EXCEPT (_rank) FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY _lsn DESC, _seq DESC) AS _rank FROM {target}{where}) WHERE _rank = 1"
    )


def guarded_insert(
    target: str,
    stage: str,
    table: MirrorTable,
    rows: pa.Table,
    truncated_at: tuple[int, int] | None,
) -> tuple[str, dict[str, Any]]:
    """Insert the staged rows newer than the stored version of their key (and than the
    table's last truncate); ``_keep`` columns take the stored value. Parameter: ``commit``."""
    columns = _columns(table, rows)
    keys = ", ".join(quote(k) for k in table.key)
    probe = f" WHERE ({keys}) IN (SELECT {', '.join(_casts(table, rows, True))} FROM {stage} AS b)"
    kept = KEEP in rows.schema.names
    values = [
        f"if(has(s.{quote(KEEP)}, {_string(n)}), k.{quote(n)}, s.{quote(n)})"
        if kept and n not in table.key
        else f"s.{quote(n)}"
        for n, _ in columns
    ]
    join = " AND ".join(f"k.{quote(k)} = s.{quote(k)}" for k in table.key)
    keep_column = f", b.{quote(KEEP)} AS {quote(KEEP)}" if kept else ""
    where = f"(k._lsn IS NULL OR {_NEWER})"
    parameters: dict[str, Any] = {}
    if truncated_at is not None:
        where += " AND (s._lsn, s._seq) > ({tl:UInt64}, {ts:Int32})"
        parameters = {"tl": truncated_at[0], "ts": truncated_at[1]}
    sql = (
        f"INSERT INTO {target} ({_names(columns)}) SELECT {', '.join(values)}, s._lsn, s._seq, "
        f"s._deleted, {{commit:UInt64}} FROM (SELECT {', '.join(_casts(table, rows))}, "
        f"b._lsn AS _lsn, b._seq AS _seq, b._deleted AS _deleted{keep_column} FROM {stage} "
        f"AS b) AS s LEFT JOIN ({latest_statement(target, table.key, probe)}) AS k ON {join} "
        f"WHERE {where}{_JOIN_SETTINGS}"
    )
    return sql, parameters


def plain_insert(target: str, stage: str, table: MirrorTable, rows: pa.Table) -> str:
    """Insert every staged row (a first load: the table holds none of their keys).
    Parameter: ``commit``."""
    return (
        f"INSERT INTO {target} ({_names(_columns(table, rows))}) SELECT "
        f"{', '.join(_casts(table, rows))}, b._lsn, b._seq, b._deleted, {{commit:UInt64}} "
        f"FROM {stage} AS b"
    )


def tombstone_statement(target: str, key: Sequence[str]) -> str:
    """Tombstone, at version ``(lsn, seq)``, every key whose newest version is live and
    older (a truncate; the rows a complete snapshot lacked). Parameters: ``lsn``, ``seq``,
    ``commit``."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"INSERT INTO {target} ({keys}, _lsn, _seq, _deleted, _commit) SELECT {keys}, "
        "{lsn:UInt64}, {seq:Int32}, true, {commit:UInt64} "
        f"FROM ({latest_statement(target, key)}) "
        "WHERE NOT _deleted AND (_lsn, _seq) < ({lsn:UInt64}, {seq:Int32})"
    )


def _names(columns: Sequence[tuple[str, str]]) -> str:
    listed = [quote(n) for n, _ in columns] + ["_lsn", "_seq", "_deleted", "_commit"]
    return ", ".join(listed)


Staged = tuple[str, pa.Table, tuple[int, int] | None]


def stage_batch(tables: dict[str, MirrorTable], batch: ChangeBatch) -> list[Staged]:
    """Each table's staged rows in a batch and the batch's truncate of it, all built before
    anything is written (an unknown table fails the batch first)."""
    staged: list[Staged] = []
    for rows in batch.tables:
        table = known_table(tables, rows.table)
        staged.append((rows.table, rows.to_arrow(table.column_names), rows.truncated_at))
    return staged
