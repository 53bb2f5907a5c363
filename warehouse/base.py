"""The warehouse interface every backend implements (DuckLake embedded, ClickHouse scale-out).

Writers (the CDC follower, the Debezium endpoint) call :meth:`Warehouse.apply` and
:meth:`Warehouse.apply_snapshot`; readers (the service, notebooks) call
:meth:`Warehouse.query_arrow`. Each successful write is one atomic warehouse commit that also
records the CDC position, and returns the snapshot ID a manifest can pin.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.changes import ChangeBatch, Position, SnapshotChunk, TableSpec
from warehouse.errors import SchemaError, WarehouseError

#: The relations a curation may read (the curation guard's allow-list).
CURATION_VIEWS: tuple[str, ...] = (
    "episodes",
    "episode_quality_flags",
    "episode_labels",
    "episode_stats",
    "episode_instructions",
    "episode_evaluations",
    "robots",
    "tasks",
    "manifests",
    "manifest_episodes",
)
#: The internal view of every lineage row as written, registered manifest or not (never in
#: the allow-list): the service's lineage queries read it and keep the rows of manifests the
#: registry holds. ``manifest_episodes`` is its rows whose manifest is mirrored.
LINEAGE_VIEW = "manifest_lineage"
#: Columns of a manifest's lineage: one row per episode, with its container's SHA-256 (the
#: version the manifest read; NULL for lineage carried over from before it was recorded).
LINEAGE_COLUMNS: tuple[str, ...] = ("manifest_id", "episode_id", "sha256")


def lineage_in_episode_order(episodes: pa.Table) -> pa.Table:
    """A lineage's ``episode_id`` and ``sha256`` columns sorted by episode id, the order the
    writers store; a build's lineage already is, so the sort runs only when a one-pass check
    finds it is not (a sort of 439k ids took 0.06 s)."""
    rows = episodes.select(["episode_id", "sha256"])
    return rows if in_episode_order(rows.column("episode_id")) else rows.sort_by("episode_id")


def in_episode_order(ids: pa.ChunkedArray) -> bool:
    """Whether episode ``ids`` have no null and each is at most the next: one pass."""
    if ids.null_count or len(ids) < 2:
        return bool(ids.null_count == 0)
    return bool(pc.all(pc.less_equal(ids[:-1], ids[1:])).as_py())


_TAG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_tag(tag: str) -> None:
    """Refuse a query tag that is not a short identifier (a backend may splice it into SQL)."""
    if not isinstance(tag, str) or not _TAG.match(tag):
        raise WarehouseError(f"not a query tag: {tag!r} (letters, digits, '-', '_')", tag=tag)


@dataclass(frozen=True)
class MirrorTable:
    """A mirrored table: source columns with their DuckDB types, and its key."""

    name: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type), source columns only
    key: tuple[str, ...]
    truncated_at: tuple[int, int] | None = None  # version of the last truncate

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]


def known_table(tables: Mapping[str, MirrorTable], name: str) -> MirrorTable:
    """The mirrored table ``name``; a change for a table the warehouse does not mirror is a
    :class:`~warehouse.errors.SchemaError`."""
    table = tables.get(name)
    if table is None:
        raise SchemaError(
            f"change for table {name!r}, which the warehouse does not mirror", table=name
        )
    return table


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run did: snapshots expired and kept for manifests, tombstones
    purged; how long it took, in seconds."""

    expired: tuple[int, ...]
    protected: tuple[int, ...]
    seconds: float
    purged: int = 0


class Warehouse(ABC):
    """One warehouse: the mirrored tables, the CDC position and the curation views."""

    #: The SQL dialect (sqlglot's name) that :meth:`query_arrow` takes.
    dialect: ClassVar[str] = "duckdb"

    @abstractmethod
    def bootstrap(self) -> None:
        """Create or upgrade the mirrored tables, the metadata and the views (idempotent)."""

    @abstractmethod
    def mirrored_tables(self) -> dict[str, tuple[str, ...]]:
        """Each mirrored table's name and key columns."""

    @abstractmethod
    def describe_tables(self) -> dict[str, MirrorTable]:
        """Each mirrored table's source columns with their warehouse types, and its key."""

    @abstractmethod
    def ensure_table(self, spec: TableSpec) -> bool:
        """Create the table or add the columns it lacks; ``True`` when something changed."""

    @abstractmethod
    def apply(self, batch: ChangeBatch) -> int:
        """Apply whole transactions' staged rows (:class:`warehouse.rows.TextRows`, one per
        table) and the position they reach in one commit.

        A row changes only when the staged ``(lsn, seq)`` is newer than the stored row's, so
        replaying a batch changes nothing. Returns the new snapshot ID.
        """

    @abstractmethod
    def apply_snapshot(
        self,
        tables: Sequence[str],
        chunks: Iterable[SnapshotChunk],
        position: Position,
        *,
        version_lsn: int | None = None,
    ) -> int:
        """Load a snapshot of ``tables`` (rows as of ``version_lsn``, default
        ``position.snapshot_lsn``) in one commit that also records ``position``, tombstoning
        older rows of those tables that the snapshot does not hold."""

    @abstractmethod
    def unloaded_tables(self) -> list[str]:
        """Mirrored tables whose pre-existing rows no snapshot has loaded (to backfill)."""

    @abstractmethod
    def position(self, *, at: int | None = None) -> Position | None:
        """The CDC position of the last commit (or as of snapshot ``at``); ``None`` before the
        first snapshot."""

    @abstractmethod
    def data_version(self, views: Collection[str], *, at: int | None = None) -> int:
        """The last snapshot at or before ``at`` (default: current) that changed the data the
        given curation views read. Same SQL + same data version = same result."""

    @abstractmethod
    def current_snapshot(self) -> int:
        """ID of the latest warehouse snapshot."""

    @abstractmethod
    def query_arrow(
        self,
        sql: str,
        *,
        snapshot_id: int | None = None,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        tables: Mapping[str, pa.Table] | None = None,
        tag: str | None = None,
    ) -> pa.Table:
        """Run one read-only query over the curation views; see the backend for limits.

        ``tables`` are Arrow tables the query can also read, by name (lower-case, unqualified
        names that shadow nothing), for this query only and unpinned by ``snapshot_id``: the
        service passes the episode ids a manifest query returned to the statistics query.
        ``tag`` (see :func:`check_tag`) names the query for :meth:`cancel`.
        """

    @abstractmethod
    def cancel(self, tag: str) -> None:
        """Stop the running read queries tagged ``tag``, from any thread, without waiting:
        each fails with a ``QueryError``. A query that starts afterwards is not affected;
        cancel again to stop it."""

    @abstractmethod
    def append_lineage(self, manifest_id: str, episodes: pa.Table) -> None:
        """Store manifest ``manifest_id``'s lineage (``episodes``: string columns
        ``episode_id`` and ``sha256``, one row per episode) as one file or part, replacing
        any rows stored under that ID before (an attempt whose registration never
        finished). Written through the lineage writer's own login, never the reader's;
        nothing reads the rows as a manifest's lineage until the registry holds the
        manifest."""

    @abstractmethod
    def drop_lineage(self, manifest_id: str) -> None:
        """Delete the lineage rows stored under ``manifest_id`` (one never registered)."""

    @abstractmethod
    def lineage_manifests(self) -> set[str]:
        """Every manifest ID that lineage rows are stored under."""

    @abstractmethod
    def maintain(self, *, protect: Collection[int] = ()) -> MaintenanceReport:
        """Compact storage and expire old snapshots, never one a manifest references (nor one
        in ``protect``, nor the latest)."""

    @abstractmethod
    def flush_inlined(self) -> float:
        """Write rows and deletes kept in the catalog (inlined) out to data files; cheap and
        meant to run often between CDC batches. Returns seconds taken."""

    @abstractmethod
    def close(self) -> None:
        """Release connections (idempotent)."""

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
