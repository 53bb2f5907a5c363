"""DuckLake's schema files: the pending files of ``sql/warehouse/ducklake/`` run inside the
writer's transaction and are recorded in the lake's ``applied_sql`` ledger (the ledger rules
are :mod:`warehouse.sqlfiles`)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from warehouse.ducklake.statements import ident, literal
from warehouse.sqlfiles import SQL_ROOT, pending, sql_files

SQL_DIR = SQL_ROOT / "ducklake"


def apply_sql_files(con: duckdb.DuckDBPyConnection, folder: Path, meta: str, alias: str) -> None:
    """Run the pending files of ``folder`` on ``con`` (inside the caller's transaction) and
    record them in ``<meta>.applied_sql``."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {meta}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {meta}.applied_sql "
        "(name VARCHAR, sha256 VARCHAR, applied_at TIMESTAMPTZ)"
    )
    rows = con.execute(f"SELECT name, sha256 FROM {meta}.applied_sql").fetchall()
    todo = pending(sql_files(folder), {str(n): str(d) for n, d in rows})
    for item in todo:
        con.execute(item.text)
        con.execute(f"DELETE FROM {meta}.applied_sql WHERE name = $1", [item.name])
        con.execute(
            f"INSERT INTO {meta}.applied_sql VALUES ($1, $2, now())", [item.name, item.sha256]
        )
    if todo:
        names = ", ".join(item.name for item in todo)
        con.execute(
            f"CALL {ident(alias)}.set_commit_message("
            f"'quarry', {literal('warehouse bootstrap: ' + names)})"
        )
