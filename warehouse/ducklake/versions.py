"""Data versions: the last snapshot that changed the data behind a set of curation views.

Every CDC commit makes a snapshot, changed data or not (heartbeats, batches of other tables),
and so does maintenance. A curation's result depends only on the mirrored tables its views
read, so the snapshot that last changed one of those tables names its data exactly: two
curations with the same SQL and the same data version give the same rows. Manifests record it,
which makes a rebuild byte-identical and lets the service reuse a manifest.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from warehouse.ducklake.maintenance import MAINTENANCE_AUTHOR

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


# -- the DuckLake snapshot log -------------------------------------------------------------
#
# DuckLake records what each commit changed as text in its catalog
# (``ducklake_snapshot_changes.changes_made``: ``kind:value`` entries separated by commas, a
# value being a table id or quoted names such as ``"mirror"."episodes"``); its
# ``snapshots()`` function parses that for every snapshot on every call. The log below reads
# only the rows it has not seen, straight from the catalog tables (the filter runs in the
# catalog database), and classifies the raw kinds itself; tests check the classification
# against ``snapshots()`` on a lake that went through every kind of commit.

#: Raw kinds of commits that move data without changing it (flush, merge, rewrite).
MAINTENANCE_KINDS = frozenset(
    {"inline_flush", "merge_adjacent", "rewrite_delete", "compacted_table", "rewrote_delete"}
    | MAINTENANCE_CHANGES
)
#: Raw kind prefixes of schema changes (tables, views, schemas, columns): they count for
#: every view.
SCHEMA_KIND_PREFIXES = ("created_", "dropped_", "altered_")

Fetch = Callable[[str, list[Any]], list[tuple[Any, ...]]]


@dataclass(frozen=True)
class SnapshotChanges:
    """What one snapshot changed, for data versions.

    :param maintenance: it moved data without changing it (or purged tombstones): never a
        data version.
    :param schema: it changed a schema (or made a change of a kind not known here): a data
        version of every view.
    :param tables: DuckLake ids (as text) of the tables whose rows it changed.
    """

    snapshot_id: int
    schema_version: int
    maintenance: bool
    schema: bool
    tables: frozenset[str]

    def changes(self, table_ids: frozenset[str]) -> bool:
        """Whether this snapshot changed the data of any of ``table_ids``."""
        return not self.maintenance and (self.schema or not self.tables.isdisjoint(table_ids))


def parse_changes(
    snapshot_id: int, schema_version: int, changes_made: str | None, author: str | None
) -> SnapshotChanges:
    """Classify one row of DuckLake's ``ducklake_snapshot_changes``. A kind this module does
    not know counts for the tables it names by id, or, naming anything else, for every
    view: an unknown change can cost a rebuild, never a stale manifest."""
    entries = split_changes(changes_made or "")
    maintenance = author == MAINTENANCE_AUTHOR or any(
        kind in MAINTENANCE_KINDS for kind, _ in entries
    )
    schema = any(
        kind.startswith(SCHEMA_KIND_PREFIXES) or not value.isdigit() for kind, value in entries
    )
    tables = frozenset(value for _, value in entries if value.isdigit())
    return SnapshotChanges(snapshot_id, schema_version, maintenance, schema, tables)


def split_changes(text: str) -> list[tuple[str, str]]:
    """``kind:value`` entries of a ``changes_made`` text; commas inside double-quoted names
    (where ``""`` is a quote) do not split."""
    entries: list[tuple[str, str]] = []
    start, quoted = 0, False
    for index, char in enumerate(text + ","):
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            entry = text[start:index]
            if entry:
                kind, _, value = entry.partition(":")
                entries.append((kind, value))
            start = index + 1
    return entries


class SnapshotLog:
    """The changes of every snapshot in a DuckLake catalog, kept in memory and brought up to
    date with one small catalog query per call (the snapshots since the last call, and how
    many of the older ones are still there). Thread-safe.

    Answers equal those read afresh from the catalog: when maintenance has expired snapshots
    the log notices (fewer old snapshots than it holds) and reads the catalog again. They
    are cached per (tables, snapshot) until then.

    :param fetch: runs a catalog query with positional parameters (``$1``) and returns rows.
    :param metadata: the schema of the lake's catalog tables, e.g. ``__ducklake_metadata_wh``.
    """

    def __init__(self, fetch: Fetch, metadata: str) -> None:
        self._fetch = fetch
        self._query = (
            "SELECT s.snapshot_id, s.schema_version, c.changes_made, c.author "
            f"FROM {metadata}.ducklake_snapshot AS s "
            f"LEFT JOIN {metadata}.ducklake_snapshot_changes AS c "
            "ON c.snapshot_id = s.snapshot_id WHERE s.snapshot_id > $1 "
            f"UNION ALL SELECT NULL, count(*), NULL, NULL FROM {metadata}.ducklake_snapshot "
            "WHERE snapshot_id <= $1"
        )
        self._snapshots: dict[int, SnapshotChanges] = {}
        self._ids: list[int] = []  # ascending
        self._versions: dict[tuple[frozenset[str], int], int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read the snapshots committed since the last call; start over if any older one
        was expired."""
        with self._lock:
            seen = self._ids[-1] if self._ids else -1
            rows = self._fetch(self._query, [seen])
            if next(int(r[1]) for r in rows if r[0] is None) != len(self._ids):
                self._snapshots, self._ids, self._versions = {}, [], {}  # expired: start over
                rows = self._fetch(self._query, [-1])
            new = [
                parse_changes(int(r[0]), int(r[1]), r[2], r[3]) for r in rows if r[0] is not None
            ]
            for changes in sorted(new, key=lambda c: c.snapshot_id):
                self._snapshots[changes.snapshot_id] = changes
                self._ids.append(changes.snapshot_id)

    @property
    def schema_version(self) -> int:
        """The schema version of the newest snapshot read (-1 before the first)."""
        with self._lock:
            return self._snapshots[self._ids[-1]].schema_version if self._ids else -1

    def data_version(self, table_ids: frozenset[str], at: int) -> int:
        """The last snapshot at or before ``at`` that changed the data of ``table_ids`` (see
        :func:`last_known_change`); call :meth:`refresh` first."""
        key = (table_ids, at)
        with self._lock:
            version = self._versions.get(key)
            if version is None:
                version = last_known_change(self._snapshots, self._ids, table_ids, at)
                self._versions[key] = version
            return version


def last_known_change(
    snapshots: Mapping[int, SnapshotChanges],
    ids: Sequence[int],
    table_ids: frozenset[str],
    at: int,
) -> int:
    """The newest of the snapshots ``ids`` (ascending) at or before ``at`` that changed the
    data of ``table_ids``; ``at`` when none did. Expired snapshots are not in the log: the
    answer is right as long as maintenance never expires the snapshot a table's data version
    points to (see ``DuckLakeWarehouse.maintain``), so that every expired change of a table
    is older than its data version."""
    for index in range(bisect.bisect_right(ids, at) - 1, -1, -1):
        changes = snapshots[ids[index]]
        if changes.changes(table_ids):
            return changes.snapshot_id
    return at


class LakeVersions:
    """Data versions of one DuckLake lake, read through ``fetch`` (the lake's reader): a
    :class:`SnapshotLog`, and each view's mirrored tables and their ids, read again only
    when the schema version changes.

    :param alias: the name the lake is attached under; :param schema: the mirrored tables'.
    """

    def __init__(self, fetch: Fetch, alias: str, schema: str) -> None:
        self._fetch = fetch
        self._alias = alias
        self._schema = schema
        self._metadata = f"__ducklake_metadata_{alias}"
        self.log = SnapshotLog(fetch, self._metadata)
        self._tables: tuple[int, dict[str, frozenset[str]], dict[str, str]] | None = None
        self._lock = threading.Lock()

    def data_version(self, views: Collection[str], at: int) -> int:
        """The last snapshot at or before ``at`` that changed the data behind ``views``
        (curation views, or mirrored tables by name)."""
        self.log.refresh()
        per_view, ids = self._catalog()
        names = {t for view in views for t in per_view.get(view, frozenset({view}))}
        return self.log.data_version(frozenset(ids[n] for n in names if n in ids), at)

    def table_versions(self, at: int) -> set[int]:
        """Each mirrored table's data version at ``at``: the snapshots maintenance must keep
        for the versions to stay right (see :func:`last_known_change`)."""
        self.log.refresh()
        _, ids = self._catalog()
        return {self.log.data_version(frozenset({i}), at) for i in ids.values()}

    def _catalog(self) -> tuple[dict[str, frozenset[str]], dict[str, str]]:
        """Each view's mirrored tables, and each mirrored table's DuckLake id (as text)."""
        version = self.log.schema_version
        with self._lock:
            if self._tables is None or self._tables[0] != version:
                definitions = self._fetch(
                    "SELECT view_name, sql FROM duckdb_views() WHERE database_name = $1",
                    [self._alias],
                )
                rows = self._fetch(
                    f"SELECT t.table_name, t.table_id FROM {self._metadata}.ducklake_table t "
                    f"JOIN {self._metadata}.ducklake_schema s USING (schema_id) "
                    "WHERE s.schema_name = $1 AND t.end_snapshot IS NULL "
                    "AND s.end_snapshot IS NULL",
                    [self._schema],
                )
                per_view = view_tables({str(n): str(q) for n, q in definitions}, self._schema)
                self._tables = (version, per_view, {str(n): str(i) for n, i in rows})
            return self._tables[1], self._tables[2]
