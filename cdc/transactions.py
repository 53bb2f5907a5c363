"""Assemble decoded pgoutput messages into whole transactions of change events.

Each change becomes a :class:`warehouse.changes.ChangeEvent` in Debezium's envelope, versioned
by its transaction's commit LSN and its ordinal inside the transaction (from 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdc.errors import DecodeError
from cdc.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    TupleData,
    TupleKind,
    Update,
    pg_time_to_unix_ms,
)
from cdc.source import warehouse_table
from cdc.values import Converter, converter
from warehouse.changes import ChangeEvent, Op, Source


@dataclass
class Transaction:
    """One committed source transaction.

    :param commit_lsn: LSN of its commit record (every event's ``source.lsn``).
    :param end_lsn: end of the commit record; the slot is advanced to it once applied.
    :param commit_time_us: commit time, microseconds since 2000-01-01 UTC.
    """

    xid: int
    commit_lsn: int
    commit_time_us: int
    end_lsn: int = 0
    events: list[ChangeEvent] = field(default_factory=list)
    relations: dict[int, Relation] = field(default_factory=dict)

    @property
    def commit_ts_ms(self) -> int:
        return pg_time_to_unix_ms(self.commit_time_us)


class TransactionAssembler:
    """Feed messages in stream order; get each transaction back at its commit."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self._plans: dict[int, RowPlan] = {}
        self._open: Transaction | None = None

    def feed(self, message: Message) -> Transaction | None:
        if isinstance(message, Begin):
            self._open = Transaction(message.xid, message.final_lsn, message.commit_time_us)
            return None
        if isinstance(message, Relation):
            self.relations[message.oid] = message
            self._plans[message.oid] = RowPlan.of(message)
            if self._open is not None:
                self._open.relations[message.oid] = message
            return None
        if isinstance(message, Commit):
            done = self._require_open("Commit")
            done.end_lsn = message.end_lsn
            self._open = None
            return done
        if isinstance(message, Insert | Update | Delete | Truncate):
            self._change(self._require_open(type(message).__name__), message)
        return None  # Origin, Type and logical messages carry nothing to mirror

    def _require_open(self, what: str) -> Transaction:
        if self._open is None:
            raise DecodeError(f"pgoutput {what} message outside a transaction")
        return self._open

    def _change(self, tx: Transaction, message: Insert | Update | Delete | Truncate) -> None:
        if isinstance(message, Truncate):
            for oid in message.relation_oids:
                tx.events.append(ChangeEvent(Op.TRUNCATE, self._source(tx, oid)))
            return
        self._relation(message.relation_oid)
        relation = self._plans[message.relation_oid]
        source = self._source(tx, message.relation_oid)
        if isinstance(message, Insert):
            after, _ = decode_row(relation, message.new)
            event = ChangeEvent(Op.CREATE, source, after=after)
        elif isinstance(message, Update):
            after, unchanged = decode_row(relation, message.new)
            before = None
            if message.old is not None:
                before, _ = decode_row(relation, message.old, keys_only=message.old_is_key)
            event = ChangeEvent(Op.UPDATE, source, before=before, after=after, unchanged=unchanged)
        else:
            before, _ = decode_row(relation, message.old, keys_only=message.old_is_key)
            event = ChangeEvent(Op.DELETE, source, before=before)
        tx.events.append(event)

    def _relation(self, oid: int) -> Relation:
        relation = self.relations.get(oid)
        if relation is None:
            raise DecodeError(
                f"change for relation {oid} before its Relation message", relation_oid=oid
            )
        return relation

    def _source(self, tx: Transaction, oid: int) -> Source:
        relation = self._relation(oid)
        return Source(
            table=warehouse_table(relation.namespace, relation.name),
            schema=relation.namespace,
            lsn=tx.commit_lsn,
            seq=len(tx.events) + 1,
            ts_ms=tx.commit_ts_ms,
            tx_id=tx.xid,
        )


@dataclass(frozen=True)
class RowPlan:
    """How to decode a relation's tuples: per column its name, key flag and converter."""

    relation: Relation
    columns: tuple[tuple[str, bool, Converter], ...]

    @classmethod
    def of(cls, relation: Relation) -> RowPlan:
        return cls(
            relation, tuple((c.name, c.is_key, converter(c.type_oid)) for c in relation.columns)
        )


def decode_row(
    plan: RowPlan | Relation, data: TupleData, *, keys_only: bool = False
) -> tuple[dict[str, Any], frozenset[str]]:
    """Column values of one tuple and the names of its unchanged TOAST columns."""
    if isinstance(plan, Relation):
        plan = RowPlan.of(plan)
    if len(data) != len(plan.columns):
        raise DecodeError(
            f"tuple of {plan.relation.name} has {len(data)} columns, its "
            f"relation {len(plan.columns)}",
            table=plan.relation.name,
        )
    values: dict[str, Any] = {}
    unchanged: list[str] = []
    for (name, is_key, convert_text), value in zip(plan.columns, data, strict=True):
        if keys_only and not is_key:
            continue
        kind = value.kind
        if kind is TupleKind.TEXT and value.data is not None:
            values[name] = convert_text(value.data.decode())
        elif kind is TupleKind.NULL:
            values[name] = None
        elif kind is TupleKind.UNCHANGED_TOAST:
            unchanged.append(name)
        else:
            raise DecodeError("binary tuple values were not requested", table=plan.relation.name)
    return values, frozenset(unchanged)
