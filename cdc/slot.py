"""The logical replication slot: create it with an exported snapshot, read its state, drop it.

The slot is streamed by :mod:`cdc.replication`, which confirms a position only after the
warehouse has committed everything up to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from psycopg import sql

from cdc.errors import CdcError
from cdc.source import Connection, connect
from warehouse.changes import parse_lsn

_STATE = """
SELECT database, active, active_pid, (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint,
       (restart_lsn - '0/0'::pg_lsn)::bigint, wal_status,
       (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
FROM pg_replication_slots WHERE slot_name = %s
"""


@dataclass(frozen=True)
class ExportedSnapshot:
    """A new slot's consistent point and the name of the snapshot exported with it."""

    consistent_lsn: int
    snapshot_name: str


@dataclass(frozen=True)
class SlotState:
    """A slot as ``pg_replication_slots`` shows it, with the server's current WAL position;
    LSNs are integer byte positions."""

    database: str
    active: bool
    active_pid: int | None
    confirmed_flush_lsn: int
    restart_lsn: int | None
    wal_status: str | None
    wal_lsn: int

    @property
    def lag_bytes(self) -> int:
        """WAL written since the slot's confirmed position (what the follower has not
        confirmed yet)."""
        return max(0, self.wal_lsn - self.confirmed_flush_lsn)

    @property
    def retained_bytes(self) -> int:
        """WAL the slot holds back: from its restart point to the current position."""
        return max(0, self.wal_lsn - (self.restart_lsn or self.wal_lsn))


@contextmanager
def exported_snapshot(
    dsn: str, slot: str, *, temporary: bool = False
) -> Iterator[ExportedSnapshot]:
    """Create ``slot`` (pgoutput) on a replication connection and keep the exported snapshot
    importable (``SET TRANSACTION SNAPSHOT``) until the block ends. A ``temporary`` slot is
    dropped when the block ends (its only use is the consistent snapshot)."""
    conn = connect(dsn, replication=True)
    try:
        kind = sql.SQL("TEMPORARY LOGICAL" if temporary else "LOGICAL")
        command = sql.SQL("CREATE_REPLICATION_SLOT {} {} pgoutput (SNAPSHOT 'export')")
        row = conn.execute(command.format(sql.Identifier(slot), kind)).fetchone()
        if row is None:
            raise CdcError("CREATE_REPLICATION_SLOT returned nothing", slot=slot)
        yield ExportedSnapshot(parse_lsn(str(row[1])), str(row[2]))
    finally:
        conn.close()


def slot_state(conn: Connection, slot: str) -> SlotState | None:
    row = conn.execute(_STATE, (slot,)).fetchone()
    if row is None:
        return None
    return SlotState(
        database=str(row[0]),
        active=bool(row[1]),
        active_pid=row[2],
        confirmed_flush_lsn=int(row[3] or 0),
        restart_lsn=row[4],
        wal_status=row[5],
        wal_lsn=int(row[6] or 0),
    )


def drop_slot(conn: Connection, slot: str) -> None:
    """Drop ``slot`` if it exists."""
    if slot_state(conn, slot) is not None:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def flush_lsn(conn: Connection) -> int:
    """The source's current WAL flush position."""
    row = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
    assert row is not None
    return int(row[0])
