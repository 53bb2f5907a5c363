"""The ClickHouse backend's bookkeeping: commits, table changes, the mirrored tables' keys
and state, and the repair of a write that failed half way.

ClickHouse has no multi-statement transactions. A write tags every row it inserts with its
commit number (``_commit``) and writes its ``commits`` row last; readers only see rows of
written commits. A write that fails before that row leaves rows tagged with a number no
commit has: :func:`repair` deletes them before the next write, so the retry starts clean and
each commit holds exactly what its one successful attempt wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from warehouse.base import MirrorTable
from warehouse.clickhouse.schema import Databases, duck_type_of

STAGE_PREFIX = "_stage_"  # <meta>._stage_<uuid>: a write's staged rows (Memory tables)
SCHEMA_CHANGE = "*"  # table_changes name of a commit that changed the schema (all tables)
_META_COLUMNS = frozenset({"_lsn", "_seq", "_deleted", "_commit"})


def _rows(client: Client, sql: str, parameters: dict[str, Any] | None = None) -> Sequence[Any]:
    return client.query(sql, parameters=parameters).result_rows


def has_table(client: Client, database: str, name: str) -> bool:
    rows = _rows(
        client,
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": database, "t": name},
    )
    return bool(rows[0][0])


def last_commit(client: Client, names: Databases) -> int:
    """The latest commit (snapshot) number; 0 before the first."""
    if not has_table(client, names.meta, "commits"):
        return 0
    rows = _rows(client, f"SELECT max(snapshot) FROM {names.ident(names.meta, 'commits')}")
    return int(rows[0][0] or 0)


def last_position(client: Client, names: Databases) -> str | None:
    """The CDC position document of the latest commit that has one."""
    if not has_table(client, names.meta, "commits"):
        return None
    rows = _rows(
        client,
        f"SELECT position FROM {names.ident(names.meta, 'commits')} "
        "WHERE position IS NOT NULL ORDER BY snapshot DESC LIMIT 1",
    )
    return str(rows[0][0]) if rows else None


def write_commit(
    client: Client,
    names: Databases,
    snapshot: int,
    position: str | None,
    *,
    author: str,
    message: str,
) -> None:
    """The commit point: one row, after everything the commit wrote."""
    client.insert(
        "commits",
        [[snapshot, position, author, message]],
        column_names=["snapshot", "position", "author", "message"],
        database=names.meta,
    )


def record_changes(client: Client, names: Databases, snapshot: int, tables: Iterable[str]) -> None:
    """Note that commit ``snapshot`` changed ``tables`` (data versions read this)."""
    rows = [[name, snapshot] for name in sorted(set(tables))]
    if rows:
        client.insert(
            "table_changes", rows, column_names=["table_name", "_commit"], database=names.meta
        )


def repair(client: Client, names: Databases) -> int:
    """Delete what a failed write left behind (rows tagged after the last commit, and its
    staging tables); returns the number of tables that held such rows."""
    for (stage,) in _rows(
        client,
        "SELECT name FROM system.tables "
        "WHERE database = {m:String} AND startsWith(name, {p:String})",
        {"m": names.meta, "p": STAGE_PREFIX},
    ):
        client.command(f"DROP TABLE IF EXISTS {names.ident(names.meta, str(stage))}")
    last = last_commit(client, names)
    tables = _rows(
        client,
        "SELECT database, table FROM system.columns WHERE database IN ({m:String}, {x:String}) "
        "AND name = '_commit' ORDER BY database, table",
        {"m": names.mirror, "x": names.meta},
    )
    repaired = 0
    for database, table in tables:
        target = names.ident(str(database), str(table))
        left = _rows(
            client, f"SELECT count() FROM {target} WHERE _commit > {{c:UInt64}}", {"c": last}
        )
        if int(left[0][0]):
            client.command(f"DELETE FROM {target} WHERE _commit > {{c:UInt64}}", {"c": last})
            repaired += 1
    return repaired


def read_tables(client: Client, names: Databases) -> dict[str, MirrorTable]:
    """The registered mirrored tables: source columns (DuckDB types), key, last truncate."""
    registered = {
        str(name): (tuple(key), None if lsn is None else (int(lsn), int(seq or 0)))
        for name, key, lsn, seq in _rows(
            client,
            "SELECT table_name, key_columns, truncated_lsn, truncated_seq FROM "
            f"{names.ident(names.meta, 'mirror_tables')} "
            "ORDER BY _commit DESC, _written DESC LIMIT 1 BY table_name",
        )
    }
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, ch_type, comment in _rows(
        client,
        "SELECT table, name, type, comment FROM system.columns WHERE database = {db:String} "
        "ORDER BY table, position",
        {"db": names.mirror},
    ):
        if column not in _META_COLUMNS:
            columns.setdefault(str(table), []).append((str(column), duck_type_of(ch_type, comment)))
    return {
        name: MirrorTable(name, tuple(columns[name]), key, truncated)
        for name, (key, truncated) in registered.items()
        if name in columns
    }


def update_tables(
    client: Client, names: Databases, snapshot: int, tables: Iterable[str], **changes: Any
) -> None:
    """Set ``changes`` (``loaded_lsn``, ``truncated_lsn``, ``truncated_seq``, or
    ``key_columns`` of a new table) on the state of ``tables``, as of commit ``snapshot``."""
    wanted = sorted(set(tables))
    fields = ["table_name", "key_columns", "loaded_lsn", "truncated_lsn", "truncated_seq"]
    current = {
        str(row[0]): dict(zip(fields, row, strict=True))
        for row in _rows(
            client,
            f"SELECT {', '.join(fields)} FROM {names.ident(names.meta, 'mirror_tables')} "
            "WHERE has({t:Array(String)}, table_name) "
            "ORDER BY _commit DESC, _written DESC LIMIT 1 BY table_name",
            {"t": wanted},
        )
    }
    rows: list[list[Any]] = []
    for name in wanted:
        state = current.get(name) or dict.fromkeys(fields)
        state |= {"table_name": name, **changes}
        rows.append(
            [state[f] if state[f] is not None or f != "key_columns" else [] for f in fields]
        )
    client.insert(
        "mirror_tables",
        [[*row, snapshot] for row in rows],
        column_names=[*fields, "_commit"],
        database=names.meta,
    )
