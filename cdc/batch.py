"""Whole transactions read from the slot and not yet applied, folded into one warehouse batch.

The reader thread folds each transaction in at its commit; the follower takes the whole batch
when it is ready to apply. Batches are therefore sized by time (what arrived while the last
batch was being applied), always end at a commit, and are bounded in changes by the reader
waiting while a full batch is pending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc.pgoutput import Relation
from cdc.transactions import Transaction
from warehouse.changes import ChangeBatch, Op, Position
from warehouse.rows import TextRows


@dataclass(frozen=True)
class CommitInfo:
    """One transaction of a batch: where it ends and when Postgres committed it.

    :param commit_ts_ms: commit time, integer milliseconds since the Unix epoch.
    """

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts_ms: int


@dataclass
class PendingBatch:
    """Transactions in commit order, folded per table into text rows."""

    tables: dict[str, TextRows] = field(default_factory=dict)
    commits: list[CommitInfo] = field(default_factory=list)
    relations: dict[int, Relation] = field(default_factory=dict)
    changes: int = 0

    def add(self, tx: Transaction) -> None:
        """Fold ``tx`` in; its changes are versioned ``(commit LSN, ordinal from 1)``."""
        lsn = tx.commit_lsn
        tables = self.tables
        for seq, change in enumerate(tx.changes, start=1):
            rows = tables.get(change.layout.table)
            if rows is None:
                rows = tables[change.layout.table] = TextRows(change.layout.table)
            if change.op is Op.UPDATE:
                version = (lsn, seq)
                rows.update(change.layout, change.old, change.values, version, change.unchanged)
            elif change.op is Op.DELETE:
                rows.delete(change.layout, change.values, (lsn, seq))
            else:
                rows.truncate((lsn, seq))
        self.changes += len(tx.changes)
        self.relations.update(tx.relations)
        self.commits.append(CommitInfo(tx.xid, lsn, tx.end_lsn, tx.commit_ts_ms))

    def __bool__(self) -> bool:
        return bool(self.commits)

    def change_batch(self, previous: Position) -> ChangeBatch:
        """The warehouse batch, reaching the end of the last transaction."""
        last = self.commits[-1]
        position = Position(
            lsn=last.end_lsn,
            snapshot_lsn=previous.snapshot_lsn,
            slot=previous.slot,
            commit_lsn=last.commit_lsn,
            tx_id=last.xid,
            commit_ts_ms=last.commit_ts_ms,
        )
        return ChangeBatch(tuple(self.tables.values()), position)
