"""DuckDB statements whose table and column names come from the catalog.

Names are quoted by sqlglot; values never enter the text (they travel in the registered Arrow
staging table or as bound parameters).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from warehouse.rows import KEEP
from warehouse.types import is_list

STAGE = "_quarry_stage"  # the staged rows (Arrow)
KEPT = "_quarry_kept"  # stored rows whose values staged rows keep
DOOMED = "_quarry_doomed"  # rowids of stored rows that staged rows replace
SKIPPED = "_quarry_skipped"  # ordinals of staged rows older than what is stored
ROW = "_row"  # the ordinal column added to the staged rows


def ident(name: str) -> str:
    """``name`` as a quoted DuckDB identifier."""
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def literal(value: str) -> str:
    """``value`` as a DuckDB string literal (for statements that take no parameters)."""
    return exp.Literal.string(value).sql(dialect="duckdb")


def table_ref(catalog: str, schema: str, table: str) -> str:
    return ".".join(ident(part) for part in (catalog, schema, table))


def _source(name: str, duck_type: str) -> str:
    """Staged column ``name`` (Postgres text, :mod:`warehouse.rows`) cast to its type: arrays
    come as JSON text, ``bytea`` as hex."""
    column = f"b.{ident(name)}"
    if is_list(duck_type):
        return f"CAST(CAST({column} AS JSON) AS {duck_type})"
    if duck_type == "BLOB":
        return f"unhex({column})"
    return f"CAST({column} AS {duck_type})"


def _newer(stage: str = "b", stored: str = "t") -> str:
    return (
        f"({stage}._lsn > {stored}._lsn OR "
        f"({stage}._lsn = {stored}._lsn AND {stage}._seq > {stored}._seq))"
    )


def _key_match(sources: dict[str, str], key: Sequence[str], stored: str = "t") -> str:
    return " AND ".join(f"{stored}.{ident(k)} = {sources[k]}" for k in key)


def _sources(columns: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {name: _source(name, duck_type) for name, duck_type in columns}


def probe_statement(target: str, columns: Sequence[tuple[str, str]], key: Sequence[str]) -> str:
    """For each staged row whose key is stored: its ordinal (``ROW``), the stored row's
    ``rowid`` and whether the staged version is newer (it replaces the stored row). The one
    scan of ``target`` in a batch, reading only the key and version columns."""
    sources = _sources([c for c in columns if c[0] in key])
    return (
        f"SELECT b.{ROW} AS row, t.rowid AS rid, {_newer()} AS replaces "
        f"FROM {STAGE} AS b JOIN {target} AS t ON {_key_match(sources, key)}"
    )


def delete_rows_statement(target: str) -> str:
    """Delete the stored rows whose ``rowid`` the ``DOOMED`` relation lists."""
    return f"DELETE FROM {target} WHERE rowid IN (SELECT rid FROM {DOOMED})"


def insert_statement(
    target: str,
    columns: Sequence[tuple[str, str]],
    key: Sequence[str],
    *,
    kept: bool,
    skip: bool = True,
) -> str:
    """Insert the staged rows, but those the ``SKIPPED`` relation lists by ordinal (a newer or
    equal version is stored); without ``skip``, every staged row.

    With ``kept``, columns named in a row's ``_keep`` take the value saved in the ``KEPT``
    relation (the stored row before the delete)."""
    sources = _sources(columns)
    keyed = set(key)
    values = []
    for name, _ in columns:
        value = sources[name]
        if kept and name not in keyed:
            value = (
                f"CASE WHEN list_contains(b.{KEEP}, {literal(name)}) "
                f"THEN k.{ident(name)} ELSE {value} END"
            )
        values.append(value)
    names = [name for name, _ in columns] + ["_lsn", "_seq", "_deleted"]
    values += ["b._lsn", "b._seq", "b._deleted"]
    join = f" LEFT JOIN {KEPT} AS k ON {_key_match(sources, key, 'k')}" if kept else ""
    where = f" WHERE b.{ROW} NOT IN (SELECT row FROM {SKIPPED})" if skip else ""
    return (
        f"INSERT INTO {target} ({', '.join(ident(n) for n in names)}) "
        f"SELECT {', '.join(values)} FROM {STAGE} AS b{join}{where}"
    )


def kept_statement(target: str, columns: Sequence[tuple[str, str]], key: Sequence[str]) -> str:
    """The stored rows whose values some staged row keeps (``_keep`` not empty)."""
    sources = _sources([c for c in columns if c[0] in key])
    return (
        f"SELECT t.* FROM {target} AS t WHERE EXISTS (SELECT 1 FROM {STAGE} AS b "
        f"WHERE len(b.{KEEP}) > 0 AND {_key_match(sources, key)} AND {_newer()})"
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
