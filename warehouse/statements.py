"""DuckDB statements whose table and column names come from the catalog.

Names are quoted by sqlglot; values never enter the text (they travel in the registered Arrow
staging table or as bound parameters).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from sqlglot import exp

from warehouse.staging import KEEP
from warehouse.types import is_list

STAGE = "_quarry_stage"


def ident(name: str) -> str:
    """``name`` as a quoted DuckDB identifier."""
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def literal(value: str) -> str:
    """``value`` as a DuckDB string literal (for statements that take no parameters)."""
    return exp.Literal.string(value).sql(dialect="duckdb")


def table_ref(catalog: str, schema: str, table: str) -> str:
    return ".".join(ident(part) for part in (catalog, schema, table))


def _source(name: str, duck_type: str, staged: pa.DataType) -> str:
    column = f"b.{ident(name)}"
    if pa.types.is_string(staged) and is_list(duck_type):
        return f"CAST(CAST({column} AS JSON) AS {duck_type})"
    if pa.types.is_string(staged) and duck_type == "BLOB":  # hex text from COPY
        return f"unhex({column})"
    return f"CAST({column} AS {duck_type})"


def merge_statement(
    target: str, columns: Sequence[tuple[str, str]], key: Sequence[str], staged: pa.Schema
) -> str:
    """MERGE the staging table into ``target``: a row is replaced only by a newer
    ``(_lsn, _seq)``; columns named in ``_keep`` keep their stored value."""
    sources = {
        name: _source(name, duck_type, staged.field(name).type) for name, duck_type in columns
    }
    on = " AND ".join(f"t.{ident(k)} = {sources[k]}" for k in key)
    keyed = set(key)
    updates = [
        f"{ident(name)} = CASE WHEN list_contains(b.{KEEP}, {literal(name)}) "
        f"THEN t.{ident(name)} ELSE {sources[name]} END"
        for name, _ in columns
        if name not in keyed
    ]
    updates += [f"{ident(m)} = b.{ident(m)}" for m in ("_lsn", "_seq", "_deleted")]
    names = [name for name, _ in columns] + ["_lsn", "_seq", "_deleted"]
    values = [sources[name] for name, _ in columns] + ["b._lsn", "b._seq", "b._deleted"]
    return (
        f"MERGE INTO {target} AS t USING {STAGE} AS b ON {on} "
        "WHEN MATCHED AND (b._lsn > t._lsn OR (b._lsn = t._lsn AND b._seq > t._seq)) "
        f"THEN UPDATE SET {', '.join(updates)} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(ident(n) for n in names)}) "
        f"VALUES ({', '.join(values)})"
    )


def truncate_statement(target: str) -> str:
    """Tombstone every live row older than the truncate's version (parameters: lsn, seq)."""
    return (
        f"UPDATE {target} SET _deleted = true, _lsn = $1, _seq = $2 "
        "WHERE NOT _deleted AND (_lsn < $1 OR (_lsn = $1 AND _seq < $2))"
    )


def stale_rows_statement(target: str) -> str:
    """After a complete snapshot at LSN $1: tombstone the live rows it did not contain."""
    return (
        f"UPDATE {target} SET _deleted = true, _lsn = $1, _seq = 0 WHERE NOT _deleted AND _lsn < $1"
    )
