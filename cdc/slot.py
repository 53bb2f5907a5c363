"""The logical replication slot: create it with an exported snapshot, peek it, advance it.

psycopg cannot consume the streaming replication protocol, so the stream is read by polling
``pg_logical_slot_peek_binary_changes`` with a bounded ``upto_nchanges``; the slot advances
only after the warehouse has committed what was read (``pg_replication_slot_advance``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from cdc.errors import CdcError, SlotDroppedError
from cdc.source import Connection, connect
from warehouse.changes import format_lsn, parse_lsn

_PEEK = """
SELECT data FROM pg_logical_slot_peek_binary_changes(
    %s, NULL, %s, 'proto_version', '1', 'publication_names', %s, 'messages', 'true')
"""
_STATE = """
SELECT database, active, active_pid, (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint,
       (restart_lsn - '0/0'::pg_lsn)::bigint, wal_status,
       (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint
FROM pg_replication_slots WHERE slot_name = %s
"""


@dataclass(frozen=True)
class ExportedSnapshot:
    """A new slot's consistent point and the name of the snapshot exported with it."""

    consistent_lsn: int
    snapshot_name: str


@dataclass(frozen=True)
class SlotState:
    """A slot as ``pg_replication_slots`` shows it; LSNs and lag in bytes."""

    database: str
    active: bool
    active_pid: int | None
    confirmed_flush_lsn: int
    restart_lsn: int | None
    wal_status: str | None
    lag_bytes: int


@contextmanager
def exported_snapshot(dsn: str, slot: str) -> Iterator[ExportedSnapshot]:
    """Create ``slot`` (pgoutput) on a replication connection and keep the exported snapshot
    importable (``SET TRANSACTION SNAPSHOT``) until the block ends."""
    conn = connect(dsn, replication=True)
    try:
        command = sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')")
        row = conn.execute(command.format(sql.Identifier(slot))).fetchone()
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
        lag_bytes=int(row[6] or 0),
    )


def drop_slot(conn: Connection, slot: str) -> None:
    """Drop ``slot`` if it exists."""
    if slot_state(conn, slot) is not None:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def peek(conn: Connection, slot: str, publication: str, max_changes: int) -> list[bytes]:
    """Raw pgoutput messages of whole transactions after the slot's confirmed position;
    at most about ``max_changes`` (Postgres finishes the transaction it is in)."""
    try:
        rows = conn.execute(_PEEK, (slot, max_changes, publication)).fetchall()
    except psycopg.errors.UndefinedObject as error:
        raise SlotDroppedError(
            f"replication slot {slot!r} does not exist any more; the warehouse cannot be "
            "brought up to date from it: run a new initial snapshot explicitly "
            "(CdcConfig.resnapshot, `quarry cdc follow --resnapshot`)",
            slot=slot,
        ) from error
    except psycopg.errors.ObjectInUse as error:
        raise CdcError(
            f"replication slot {slot!r} is in use by another process; is a second "
            "follower running?",
            retryable=True,
            slot=slot,
        ) from error
    return [bytes(data) for (data,) in rows]


def advance(conn: Connection, slot: str, lsn: int) -> None:
    """Move the slot's confirmed position to ``lsn`` (never backwards: Postgres ignores that)."""
    conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))


def flush_lsn(conn: Connection) -> int:
    """The source's current WAL flush position."""
    row = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
    assert row is not None
    return int(row[0])
