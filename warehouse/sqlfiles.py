"""The warehouse's own SQL files: numbered forward-only migrations and a re-appliable views file.

``sql/warehouse/<backend>/NNNN_name.sql`` run once each, in order; ``views.sql`` runs again
whenever its contents change. A ledger table records each file's SHA-256.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from warehouse.errors import SchemaError

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
