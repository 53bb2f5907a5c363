"""Whole transactions from the slot, after a given position.

A poll peeks at most about ``max_changes_per_poll`` changes (Postgres always finishes the
transaction it is in, so a poll ends at a commit), decodes them, and drops the transactions the
warehouse already holds (those ending at or before its position): the warehouse's position is
authoritative, the slot's only a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psycopg

from cdc.config import CdcConfig
from cdc.errors import SourceUnavailableError
from cdc.pgoutput import Relation, decode_message
from cdc.slot import SlotState, advance, peek, slot_state
from cdc.source import Connection, connect, warehouse_table
from cdc.transactions import Transaction, TransactionAssembler
from warehouse.changes import ColumnSpec, TableSpec

HEARTBEAT_PREFIX = "quarry_heartbeat"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Poll:
    transactions: list[Transaction]
    changes: int  # messages read, skipped ones included
    drained: bool  # the slot held fewer changes than the poll's bound


class ChangeStream:
    """One pinned session on the source that peeks and advances the slot."""

    def __init__(self, dsn: str, config: CdcConfig) -> None:
        self._dsn, self._config = dsn, config
        self._conn: Connection | None = None
        self._types: dict[tuple[int, int], str] = {}

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._dsn)
        return self._conn

    def poll(self, after_lsn: int) -> Poll:
        """Transactions ending after ``after_lsn``, in commit order."""
        raw = self._call(
            lambda conn: peek(
                conn, self._config.slot, self._config.publication, self._config.max_changes_per_poll
            )
        )
        assembler = TransactionAssembler()
        done = []
        for data in raw:
            tx = assembler.feed(decode_message(data))
            if tx is not None and tx.end_lsn > after_lsn:
                done.append(tx)
        return Poll(done, len(raw), drained=len(raw) < self._config.max_changes_per_poll)

    def advance(self, lsn: int) -> None:
        """Confirm everything up to ``lsn`` to the slot (after the warehouse committed it)."""
        self._call(lambda conn: advance(conn, self._config.slot, lsn))

    def state(self) -> SlotState | None:
        return self._call(lambda conn: slot_state(conn, self._config.slot))

    def heartbeat(self) -> None:
        """Write a transactional logical message: the next poll returns it as an empty
        transaction, whose end the warehouse records and the slot then advances to, so a
        quiet publication does not hold back WAL written by other databases and tables."""
        self._call(
            lambda conn: conn.execute(
                "SELECT pg_logical_emit_message(true, %s, '')", (HEARTBEAT_PREFIX,)
            )
        )

    def table_spec(self, relation: Relation) -> TableSpec:
        """The warehouse spec of a table as a Relation message describes it."""
        columns = tuple(
            ColumnSpec(c.name, self._type_name(c.type_oid, c.type_modifier))
            for c in relation.columns
        )
        key = tuple(c.name for c in relation.columns if c.is_key)
        return TableSpec(warehouse_table(relation.namespace, relation.name), columns, key)

    def _type_name(self, oid: int, modifier: int) -> str:
        if (oid, modifier) not in self._types:
            row = self._call(
                lambda conn: conn.execute(
                    "SELECT format_type(%s, %s)", (oid, modifier if modifier >= 0 else None)
                ).fetchone()
            )
            self._types[(oid, modifier)] = str(row[0]) if row else "text"
        return self._types[(oid, modifier)]

    def _call(self, step: Callable[[Connection], _T]) -> _T:
        try:
            return step(self._connection())
        except psycopg.OperationalError as error:
            self.close()
            raise SourceUnavailableError(f"lost the source database: {error}") from error

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
