"""Data versions: the last snapshot that changed the data behind a set of curation views.

Every CDC commit makes a snapshot, changed data or not (heartbeats, batches of other tables),
and so does maintenance. A curation's result depends only on the mirrored tables its views
read, so the snapshot that last changed one of those tables names its data exactly: two
curations with the same SQL and the same data version give the same rows. Manifests record it,
which makes a rebuild byte-identical and lets the service reuse a manifest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

# Commits whose changes move data without changing it (flushing inlined rows to Parquet,
# merging files, rewriting deletes): a data version never stops at one of them.
MAINTENANCE_CHANGES = frozenset(
    {"flushed_inlined", "merge_adjacent", "compacted_table", "rewrite_delete", "rewrote_delete"}
)


def view_tables(view_sql: Mapping[str, str], schema: str) -> dict[str, frozenset[str]]:
    """Each view's tables in ``schema`` (e.g. ``mirror``), from its SQL definition."""
    tables: dict[str, frozenset[str]] = {}
    for view, sql in view_sql.items():
        tree = sqlglot.parse_one(sql, read="duckdb")
        tables[view] = frozenset(t.name for t in tree.find_all(exp.Table) if t.db == schema)
    return tables


def last_change(
    snapshots: list[tuple[int, Mapping[str, Any]]], table_ids: Collection[str]
) -> int | None:
    """The newest snapshot among ``(snapshot_id, changes)`` whose changes touch one of
    ``table_ids`` (DuckLake table ids as text) and is not maintenance; schema changes count."""
    wanted = set(table_ids)
    for snapshot_id, changes in sorted(snapshots, key=lambda s: s[0], reverse=True):
        keys = set(changes)
        if keys & MAINTENANCE_CHANGES:
            continue
        touched = {str(t) for values in changes.values() for t in (values or ())}
        if touched & wanted or any(
            key.endswith(("_created", "_dropped", "_altered")) for key in keys
        ):
            return int(snapshot_id)
    return None
