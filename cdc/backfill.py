"""Backfill: the pre-existing rows of a table added to the publication after the initial
snapshot.

The slot sends a new table's changes from the moment it joins the publication, never the rows
it already held. When the stream meets such a table (the warehouse creates it on its first
Relation message), the follower loads the table's rows at the consistent point ``C`` of a
temporary slot's exported snapshot, versioned ``(C, 0)`` (:func:`cdc.snapshot.load_tables`).
The stream keeps going meanwhile: changes committed after ``C`` are newer and win, changes
before ``C`` are older and their effect is in the rows read, so the two converge in any order.
The same warehouse commit marks the table loaded; a table still unloaded after a crash is
backfilled on the next start.
"""

from __future__ import annotations

import logging
import threading

from cdc.config import CdcConfig
from cdc.pgoutput import Relation
from cdc.snapshot import load_tables
from warehouse.base import Warehouse
from warehouse.changes import Position, TableSpec

log = logging.getLogger(__name__)


class Backfiller:
    """Tables waiting for a backfill, and the loads themselves (on the follower's thread)."""

    def __init__(self, dsn: str, warehouse: Warehouse, config: CdcConfig) -> None:
        self._dsn, self._warehouse, self._config = dsn, warehouse, config
        self._lock = threading.Lock()
        self._pending: set[str] = set()

    def request(self, spec: TableSpec, relation: Relation) -> None:
        """A table new to the warehouse appeared in the stream (called on the reader thread)."""
        with self._lock:
            self._pending.add(spec.name)
        log.info("table %s.%s joined the publication: backfill queued", *_names(relation))

    def request_unloaded(self) -> None:
        """Queue the tables a previous run created but did not get to backfill."""
        unloaded = self._warehouse.unloaded_tables()
        with self._lock:
            self._pending.update(unloaded)

    @property
    def pending(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def run(self, position: Position) -> int:
        """Backfill every queued table in one warehouse commit that keeps ``position``;
        returns the number of rows loaded."""
        with self._lock:
            names = set(self._pending)
        report = load_tables(self._dsn, self._warehouse, self._config, names, position)
        with self._lock:
            self._pending -= names
        log.info("backfilled %s: %d rows in %.2f s", sorted(names), report.rows, report.seconds)
        return report.rows


def _names(relation: Relation) -> tuple[str, str]:
    return relation.namespace, relation.name
