"""What the warehouse is asked to apply: change events, the CDC position, snapshot chunks.

Events follow Debezium's envelope (``op``, ``before``, ``after``, ``source``) so that the built-in
follower and Debezium's own output go through one apply path. Every row change carries its
*version*, ``(source.lsn, source.seq)``: the commit LSN of the transaction that made it and the
change's ordinal inside that transaction. A stored row is replaced only by a newer version, so
replayed or re-delivered events converge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from warehouse.rows import TextRows


class Op(StrEnum):
    """Debezium operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row of the initial snapshot
    TRUNCATE = "t"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a change came from (Debezium's ``source`` block).

    :param lsn: commit LSN of the transaction, as an integer byte position in the WAL.
    :param seq: ordinal of the change inside its transaction, from 1; 0 for snapshot rows.
    :param tx_id: Postgres transaction ID, if known.
    :param ts_ms: commit time, integer milliseconds since the Unix epoch.
    """

    table: str
    lsn: int
    seq: int
    ts_ms: int
    tx_id: int | None = None
    schema: str = "public"
    snapshot: bool = False

    @property
    def version(self) -> tuple[int, int]:
        return (self.lsn, self.seq)


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One row change in Debezium's envelope.

    ``before`` holds at least the key columns for ``d`` (and for ``u`` when the key changed);
    ``after`` the new row for ``c``, ``u`` and ``r``. ``unchanged`` names the columns of ``after``
    that Postgres did not send (unchanged TOASTed values): the stored value is kept.
    """

    op: Op
    source: Source
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    unchanged: frozenset[str] = frozenset()

    def to_debezium(self) -> dict[str, Any]:
        """The event as Debezium's JSON value payload (values made JSON-safe)."""
        src = self.source
        return {
            "op": self.op.value,
            "before": _json_row(self.before),
            "after": _json_row(self.after),
            "source": {
                "connector": "postgresql",
                "name": "quarry",
                "db": "",
                "schema": src.schema,
                "table": src.table,
                "lsn": src.lsn,
                "sequence": json.dumps([str(src.lsn), str(src.seq)]),
                "txId": src.tx_id,
                "ts_ms": src.ts_ms,
                "snapshot": "true" if src.snapshot else "false",
            },
            "ts_ms": src.ts_ms,
        }


def _json_row(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {name: _json_value(value) for name, value in row.items()}


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


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

    def to_json(self) -> str:
        return json.dumps(
            {
                "lsn": self.lsn,
                "commit_lsn": self.commit_lsn,
                "tx_id": self.tx_id,
                "commit_ts_ms": self.commit_ts_ms,
                "snapshot_lsn": self.snapshot_lsn,
                "slot": self.slot,
                "lsn_text": format_lsn(self.lsn),
            },
            sort_keys=True,
        )

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
    """Whole transactions' changes, in commit order, and the position they reach.

    Changes come as Debezium-envelope ``events`` (typed values: the Debezium endpoint, tests)
    and/or as ``tables`` of text rows already folded per key (the follower's fast path); one
    table's changes use one of the two. No changes with a position is a heartbeat: it only
    moves the position.
    """

    events: Sequence[ChangeEvent]
    position: Position
    commit_ts: datetime | None = None  # Postgres commit time of the last transaction
    tables: Sequence[TextRows] = ()

    @property
    def first_commit_ts(self) -> datetime | None:
        stamps = [e.source.ts_ms for e in self.events]
        return datetime.fromtimestamp(min(stamps) / 1000, UTC) if stamps else None


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
