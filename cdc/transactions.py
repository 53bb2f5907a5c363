"""Assemble decoded pgoutput messages into whole transactions of row changes.

A change keeps its column values as Postgres text (``bytes`` straight from the wire, arrays and
``bytea`` rewritten to the text the warehouse casts); nothing is converted per value in Python.
Each change is versioned by its transaction's commit LSN and its ordinal inside the
transaction (from 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cdc.errors import DecodeError
from cdc.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    TupleData,
    Update,
    pg_time_to_unix_ms,
)
from cdc.values import TextFixup, warehouse_text
from warehouse.changes import Op
from warehouse.rows import Layout, TextValue

#: The layout a relation's rows are staged with (its warehouse table and key); resolving
#: one may create the warehouse table (a table new to the publication).
LayoutResolver = Callable[[Relation], Layout]


@dataclass(frozen=True, slots=True)
class RowChange:
    """One change: ``UPDATE`` stands for insert or update (an upsert), with the ``old`` key
    or row when Postgres sent it (:meth:`warehouse.rows.TextRows.update` retires the old key
    when it changed); ``DELETE`` carries the old key in ``values``, ``TRUNCATE`` no values.
    ``unchanged``: positions of unchanged TOAST values (not sent; the stored value is kept)."""

    op: Op
    layout: Layout
    values: tuple[TextValue, ...] = ()
    unchanged: tuple[int, ...] = ()
    old: tuple[TextValue, ...] | None = None


@dataclass
class Transaction:
    """One committed source transaction.

    :param commit_lsn: LSN of its commit record (every change's version).
    :param end_lsn: end of the commit record; the slot is confirmed to it once applied.
    :param commit_time_us: commit time, microseconds since 2000-01-01 UTC.
    :param relations: Relation messages received inside it (a schema may have changed).
    """

    xid: int
    commit_lsn: int
    commit_time_us: int
    end_lsn: int = 0
    changes: list[RowChange] = field(default_factory=list)
    relations: dict[int, Relation] = field(default_factory=dict)

    @property
    def commit_ts_ms(self) -> int:
        """Commit time, integer milliseconds since the Unix epoch."""
        return pg_time_to_unix_ms(self.commit_time_us)


@dataclass(frozen=True)
class RowPlan:
    """How one relation's tuples become staged text: its layout and the per-column fixups."""

    relation: Relation
    layout: Layout
    fixups: tuple[tuple[int, TextFixup], ...]

    @classmethod
    def of(cls, relation: Relation, layout: Layout) -> RowPlan:
        fixups = []
        for i, column in enumerate(relation.columns):
            fixup = warehouse_text(column.type_oid)
            if fixup is not None:
                fixups.append((i, fixup))
        return cls(relation, layout, tuple(fixups))

    def text(self, data: TupleData) -> tuple[tuple[TextValue, ...], tuple[int, ...]]:
        """The tuple's values as staged text, and the positions of unchanged TOAST values."""
        if len(data) != len(self.layout.columns):
            raise DecodeError(
                f"tuple of {self.relation.name} has {len(data)} columns, its relation "
                f"{len(self.layout.columns)}",
                table=self.relation.name,
            )
        # Binary values are never requested (no 'binary' option), so a value is text or None.
        unchanged: tuple[int, ...] = ()
        if UNCHANGED in data:
            unchanged = tuple(i for i, v in enumerate(data) if v is UNCHANGED)
            data = tuple(None if v is UNCHANGED else v for v in data)
        if self.fixups:
            fixed = list(data)
            for i, fixup in self.fixups:
                value = fixed[i]
                if isinstance(value, bytes):
                    fixed[i] = fixup(value)
            data = tuple(fixed)
        return data, unchanged  # type: ignore[return-value]


class TransactionAssembler:
    """Feed messages in stream order; get each transaction back at its commit."""

    def __init__(self, layout_of: LayoutResolver) -> None:
        self._layout_of = layout_of
        self.relations: dict[int, Relation] = {}
        self._plans: dict[int, RowPlan] = {}
        self._open: Transaction | None = None

    def feed(self, message: Message) -> Transaction | None:
        if isinstance(message, Insert | Update | Delete | Truncate):
            self._change(self._require_open(type(message).__name__), message)
            return None
        if isinstance(message, Begin):
            self._open = Transaction(message.xid, message.final_lsn, message.commit_time_us)
            return None
        if isinstance(message, Commit):
            done = self._require_open("Commit")
            done.end_lsn = message.end_lsn
            self._open = None
            return done
        if isinstance(message, Relation):
            self.relations[message.oid] = message
            self._plans[message.oid] = RowPlan.of(message, self._layout_of(message))
            if self._open is not None:
                self._open.relations[message.oid] = message
        return None  # Origin, Type and logical messages carry nothing to mirror

    def _require_open(self, what: str) -> Transaction:
        if self._open is None:
            raise DecodeError(f"pgoutput {what} message outside a transaction")
        return self._open

    def _plan(self, oid: int) -> RowPlan:
        plan = self._plans.get(oid)
        if plan is None:
            raise DecodeError(
                f"change for relation {oid} before its Relation message", relation_oid=oid
            )
        return plan

    def _change(self, tx: Transaction, message: Insert | Update | Delete | Truncate) -> None:
        changes = tx.changes
        if isinstance(message, Insert):
            plan = self._plan(message.relation_oid)
            values, unchanged = plan.text(message.new)
            changes.append(RowChange(Op.UPDATE, plan.layout, values, unchanged))
        elif isinstance(message, Update):
            plan = self._plan(message.relation_oid)
            values, unchanged = plan.text(message.new)
            old = None if message.old is None else plan.text(message.old)[0]
            changes.append(RowChange(Op.UPDATE, plan.layout, values, unchanged, old))
        elif isinstance(message, Delete):
            plan = self._plan(message.relation_oid)
            old, _ = plan.text(message.old)
            changes.append(RowChange(Op.DELETE, plan.layout, old))
        else:
            for oid in message.relation_oids:
                changes.append(RowChange(Op.TRUNCATE, self._plan(oid).layout))
