"""What the warehouse is asked to apply: change batches, the CDC position, snapshot chunks.

Every row change carries its *version* ``(lsn, seq)``: the commit LSN of the transaction that
made it and the change's ordinal inside that transaction (the follower), or the change's own
LSN and 0 (Debezium). A stored row is replaced only by a newer version, so replayed or
re-delivered changes converge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pyarrow as pa

from warehouse.rows import TextRows


class Op(StrEnum):
    """Kinds of row change, with Debezium's operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row of the initial snapshot
    TRUNCATE = "t"


@dataclass(frozen=True, slots=True)
class Position:
    """How far the warehouse has applied the source's change stream.

    :param lsn: WAL position the warehouse is complete through: the end of the last applied
        transaction, or a quiet point a heartbeat recorded. The replication slot is advanced
        to it, never past it.
    :param commit_lsn: commit LSN of the last applied transaction; 0 before the first one.
    :param tx_id: its transaction ID.
    :param commit_ts_ms: its commit time, integer milliseconds since the Unix epoch.
    :param snapshot_lsn: consistent point of the initial snapshot these changes follow.
    :param slot: replication slot the stream comes from.
    """

    lsn: int
    snapshot_lsn: int
    slot: str
    commit_lsn: int = 0
    tx_id: int | None = None
    commit_ts_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The position as a JSON object (what a manifest of format version 2 records)."""
        return {
            "lsn": self.lsn,
            "commit_lsn": self.commit_lsn,
            "tx_id": self.tx_id,
            "commit_ts_ms": self.commit_ts_ms,
            "snapshot_lsn": self.snapshot_lsn,
            "slot": self.slot,
            "lsn_text": format_lsn(self.lsn),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text, keys sorted (the warehouse's and a version-1
        manifest's form; its bytes must not change)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Position:
        doc = json.loads(text)
        return cls(
            lsn=int(doc["lsn"]),
            snapshot_lsn=int(doc["snapshot_lsn"]),
            slot=str(doc["slot"]),
            commit_lsn=int(doc["commit_lsn"]),
            tx_id=doc["tx_id"],
            commit_ts_ms=doc["commit_ts_ms"],
        )


def format_lsn(lsn: int) -> str:
    """An integer LSN in Postgres's ``X/X`` text form."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """Postgres's ``X/X`` LSN text as an integer byte position."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """Whole transactions' changes, folded per table into text rows, and the position they
    reach. The follower (:mod:`cdc.batch`) and the Debezium endpoint (:mod:`cdc.debezium`)
    both stage into :class:`warehouse.rows.TextRows`, one per table. No tables with a position
    is a heartbeat: it only moves the position.
    """

    tables: Sequence[TextRows]
    position: Position


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """Rows of one table read inside the exported snapshot.

    ``rows`` holds the table's columns as Postgres text (``NULL`` as null); arrays as JSON
    text, ``bytea`` as hex. Each row's version is ``(snapshot_lsn, 0)``.
    """

    table: str
    rows: pa.Table


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A source column: name and Postgres type as ``format_type`` spells it."""

    name: str
    pg_type: str


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A mirrored table as the source defines it."""

    name: str
    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]
