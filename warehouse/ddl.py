"""The warehouse's own SQL files: numbered forward-only migrations and a re-appliable views file.

``sql/warehouse/<backend>/NNNN_name.sql`` run once each, in order; ``views.sql`` runs again
whenever its contents change. A ledger table records each file's SHA-256.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from warehouse.errors import SchemaError
from warehouse.statements import ident, literal

SQL_ROOT = Path(__file__).resolve().parents[1] / "sql" / "warehouse"
VIEWS_FILE = "views.sql"
_NUMBERED = re.compile(r"^\d{4}_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class SqlFile:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def replaceable(self) -> bool:
        return self.name == VIEWS_FILE


def sql_files(folder: Path) -> list[SqlFile]:
    """The numbered files in order, then the views file."""
    numbered = []
    for path in sorted(folder.glob("*.sql")):
        if path.name == VIEWS_FILE:
            continue
        if not _NUMBERED.match(path.name):
            raise SchemaError(
                f"warehouse SQL file names look like 0001_name.sql: {path}", path=str(path)
            )
        numbered.append(SqlFile(path.name, path.read_text()))
    views = folder / VIEWS_FILE
    return numbered + ([SqlFile(VIEWS_FILE, views.read_text())] if views.exists() else [])


def pending(files: list[SqlFile], applied: dict[str, str]) -> list[SqlFile]:
    """Files to run given the ledger (name -> SHA-256); refuses an edited numbered file."""
    todo = []
    for item in files:
        digest = applied.get(item.name)
        if digest == item.sha256:
            continue
        if digest is not None and not item.replaceable:
            raise SchemaError(
                f"warehouse migration {item.name} changed after it was applied; "
                "add a new numbered file instead",
                file=item.name,
            )
        todo.append(item)
    return todo


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
