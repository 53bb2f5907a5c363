"""Lineage: which episodes (and container versions) each registered manifest holds.

The rows live in the warehouse, one file per manifest (``Warehouse.append_lineage``), not in
the operational database: a large curation sends no row per episode through Postgres's WAL
or CDC. A manifest's lineage is written first, under its ID, and its registry row last
(:func:`curation.registration.register_manifest`), so a crash in between leaves lineage
rows whose manifest the registry does not hold: every reader ignores them (the warehouse's
``manifest_episodes`` view shows only mirrored manifests' rows; the queries here keep only
registered ones) and :func:`collect_lineage` deletes them. Registering and collecting one
manifest ID take turns under a Postgres advisory lock on it.

The service's queries read the raw rows (:data:`warehouse.base.LINEAGE_VIEW`) and take the
registry and the episodes from Postgres, so their answers do not wait for CDC.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from psycopg import sql
from psycopg.rows import dict_row
from sqlglot import exp

from curation.render import render
from manifests.schema import EPISODE_ID, SHA256
from warehouse.base import LINEAGE_VIEW

#: The Postgres table migration 0007 renames the old lineage rows to, until they are carried
#: over to the warehouse (:func:`carry_over_lineage`).
LEGACY_TABLE = "manifest_episodes_legacy"
_WANTED = "lineage_wanted"  # the Arrow table that carries a query's values
#: Episode ids read from the warehouse per round of a filtered page.
PAGE_CHUNK = 4096


class LineageStore(Protocol):
    """What lineage needs of the warehouse (any :class:`warehouse.base.Warehouse` is one)."""

    @property
    def dialect(self) -> str: ...

    def query_arrow(
        self, sql: str, *, tables: dict[str, pa.Table] | None = None, max_rows: int | None = None
    ) -> pa.Table: ...

    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None: ...

    def drop_lineage(self, manifest_id: str) -> None: ...

    def lineage_manifests(self) -> set[str]: ...


def lineage_rows(table: pa.Table) -> pa.Table:
    """A manifest table's lineage: each (episode id, container SHA-256) once, by episode id.

    A manifest's own rows are sorted by episode id (:func:`manifests.build.prepare_table`)
    and hold one SHA-256 per episode, so dropping each row equal to the one before gives the
    answer in one pass (at 439k episodes: a group-by and a sort took 0.5 s); any other table
    is grouped and sorted."""
    pairs = table.select([EPISODE_ID, SHA256]).combine_chunks()
    if pairs.num_rows < 2:
        return pairs
    ids, shas = pairs[EPISODE_ID], pairs[SHA256]
    head, tail = slice(0, pairs.num_rows - 1), slice(1, pairs.num_rows)
    if pc.all(pc.less_equal(ids[head], ids[tail])).as_py():
        changed = pc.or_(pc.not_equal(ids[tail], ids[head]), pc.not_equal(shas[tail], shas[head]))
        kept = pairs.filter(pa.concat_arrays([pa.array([True]), changed.combine_chunks()]))
        kept_ids = kept[EPISODE_ID]
        if (
            kept.num_rows < 2
            or pc.all(pc.not_equal(kept_ids[1:], kept_ids[: kept.num_rows - 1])).as_py()
        ):
            return kept
    grouped = pairs.group_by([EPISODE_ID, SHA256]).aggregate([])
    return grouped.sort_by([(EPISODE_ID, "ascending"), (SHA256, "ascending")])


def lock_key(manifest_id: str) -> int:
    """The advisory lock key of a manifest ID (its first 15 hex digits: a positive bigint)."""
    return int(manifest_id[:15], 16)


# -- reads ---------------------------------------------------------------------------------

_PAGE_SQL = (
    f"SELECT l.episode_id AS episode_id FROM {LINEAGE_VIEW} AS l "
    f"WHERE l.manifest_id = (SELECT manifest_id FROM {_WANTED}) "
    f"AND l.episode_id > (SELECT after FROM {_WANTED}) ORDER BY l.episode_id"
)
_HOLDERS_SQL = (
    f"SELECT DISTINCT l.manifest_id AS manifest_id FROM {LINEAGE_VIEW} AS l "
    f"WHERE l.episode_id = (SELECT episode_id FROM {_WANTED})"
)


def _query(store: LineageStore, sql: str, limit: int | None, **values: str) -> pa.Table:
    tree = sqlglot.parse_one(sql, read="duckdb")
    if limit is not None:
        assert isinstance(tree, exp.Select)
        tree = tree.limit(limit)
    wanted = pa.table({name: pa.array([value], pa.string()) for name, value in values.items()})
    return store.query_arrow(render(tree, store.dialect), tables={_WANTED: wanted})


def episode_ids_after(
    store: LineageStore, manifest_id: str, after: str | None, limit: int
) -> list[str]:
    """Up to ``limit`` episode ids of ``manifest_id``'s lineage after ``after``, in order."""
    rows = _query(store, _PAGE_SQL, limit, manifest_id=manifest_id, after=after or "")
    return [str(v) for v in rows["episode_id"].to_pylist()]


def holders(store: LineageStore, episode_id: uuid.UUID) -> list[str]:
    """Every manifest ID with lineage rows for ``episode_id`` (registered or not)."""
    rows = _query(store, _HOLDERS_SQL, None, episode_id=str(episode_id))
    return sorted(str(v) for v in rows["manifest_id"].to_pylist())


def manifest_episodes(
    conn: psycopg.Connection[Any],
    store: LineageStore,
    manifest_id: str,
    *,
    pipeline_below: int | None,
    limit: int,
    after: uuid.UUID | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The episodes of the registered manifest ``manifest_id`` (a full ID) with their stamps
    and status, by episode id; only those with ``pipeline_version < pipeline_below`` when
    given (the stale ones, to reprocess). Keyset-paginated: pass the returned cursor as
    ``after``. Ids come from the warehouse's lineage, stamps from Postgres's episodes."""
    found: list[dict[str, Any]] = []
    cursor = None if after is None else str(after)
    chunk = max(limit + 1, PAGE_CHUNK if pipeline_below is not None else 0)
    while len(found) <= limit:
        ids = episode_ids_after(store, manifest_id, cursor, chunk)
        if not ids:
            break
        with conn.cursor(row_factory=dict_row) as cur:
            found += cur.execute(
                "SELECT e.id AS episode_id, e.pipeline_version, e.schema_version, "
                "e.robot_sw_version, e.status FROM episodes e WHERE e.id = ANY(%s::uuid[]) "
                "AND (%s::integer IS NULL OR e.pipeline_version < %s) ORDER BY e.id",
                (ids, pipeline_below, pipeline_below),
            ).fetchall()
        if len(ids) < chunk:
            break
        cursor = ids[-1]
    more = len(found) > limit
    rows = found[:limit]
    for row in rows:
        row["episode_id"] = str(row["episode_id"])
    return rows, rows[-1]["episode_id"] if more else None


def registered_holders(
    conn: psycopg.Connection[Any], store: LineageStore, episode_id: uuid.UUID
) -> list[str]:
    """The IDs of the registered manifests that hold ``episode_id``."""
    stored = holders(store, episode_id)
    if not stored:
        return []
    rows = conn.execute("SELECT id FROM manifests WHERE id = ANY(%s)", (stored,)).fetchall()
    return sorted(str(row[0]) for row in rows)


# -- collection and the upgrade ------------------------------------------------------------


def collect_lineage(
    conn: psycopg.Connection[Any], store: LineageStore, *, dry_run: bool = False
) -> list[str]:
    """Delete the lineage of manifests the registry does not hold (a registration that
    crashed between its two writes) and return their IDs; a manifest being registered
    right now (its advisory lock taken) is left alone. ``dry_run`` deletes nothing."""
    stored = store.lineage_manifests()
    rows = conn.execute("SELECT id FROM manifests WHERE id = ANY(%s)", (sorted(stored),))
    orphans = sorted(stored - {str(row[0]) for row in rows.fetchall()})
    collected = []
    for manifest_id in orphans:
        with conn.transaction():
            locked = conn.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (lock_key(manifest_id),)
            ).fetchone()
            if not (locked and locked[0]):
                continue
            held = conn.execute("SELECT 1 FROM manifests WHERE id = %s", (manifest_id,))
            if held.fetchone() is not None:
                continue
            if not dry_run:
                store.drop_lineage(manifest_id)
            collected.append(manifest_id)
    return collected


def carry_over_lineage(conn: psycopg.Connection[Any], store: LineageStore) -> int:
    """Append each manifest's lineage rows that Postgres migration 0007 set aside
    (:data:`LEGACY_TABLE`) to the warehouse, then drop that table; returns the manifests
    carried. Their container SHA-256s were never recorded: NULL. Safe to repeat after a
    crash (an append replaces what an earlier try wrote); a no-op once done."""
    with conn.transaction():
        exists = conn.execute("SELECT to_regclass(%s)", (LEGACY_TABLE,)).fetchone()
        if exists is None or exists[0] is None:
            return 0
        legacy = sql.Identifier(LEGACY_TABLE)
        ids = conn.execute(
            sql.SQL("SELECT DISTINCT manifest_id FROM {} ORDER BY manifest_id").format(legacy)
        ).fetchall()
        for (manifest_id,) in ids:
            episodes = conn.execute(
                sql.SQL(
                    "SELECT episode_id::text FROM {} WHERE manifest_id = %s ORDER BY episode_id"
                ).format(legacy),
                (manifest_id,),
            ).fetchall()
            column = pa.array([row[0] for row in episodes], pa.string())
            table = pa.table({EPISODE_ID: column, SHA256: pa.nulls(len(column), pa.string())})
            store.append_lineage(str(manifest_id), table)
        conn.execute(sql.SQL("DROP TABLE {}").format(legacy))
    return len(ids)


def count_holders(conn: psycopg.Connection[Any], store: LineageStore, episode_id: uuid.UUID) -> int:
    """How many registered manifests hold ``episode_id``."""
    return len(registered_holders(conn, store, episode_id))
