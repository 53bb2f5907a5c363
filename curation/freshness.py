"""How far behind the source a curation's data is, and the bound it may be held to.

The warehouse records with each commit the CDC position it reaches, and the position the
source commit time of the last transaction (or heartbeat) it covers: the follower's idle
heartbeats keep it current on a quiet source, the Debezium endpoint takes each event's
``source.ts_ms``, the initial snapshot the time it started. So every change the source
committed before that time is in the snapshot, and ``now - commit time`` bounds how stale the
snapshot is: its *warehouse lag*. "Now" is the source database's clock, the clock of the
commit time, so no clock skew between machines enters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from curation.errors import WarehouseLagError
from warehouse.changes import Position


@dataclass(frozen=True)
class LagBound:
    """``max_lag_s``: seconds a curation's snapshot may lag the source (``None``: no bound);
    ``on_lag``: past it, refuse (:class:`WarehouseLagError`) or warn."""

    max_lag_s: float | None = None
    on_lag: Literal["refuse", "warn"] = "refuse"


def warehouse_lag_s(position: Position | None, conn: psycopg.Connection[Any]) -> float | None:
    """Seconds, on the source's clock, since the commit time ``position`` covers; ``None``
    when the warehouse has no position or it records no time."""
    if position is None or position.commit_ts_ms is None:
        return None
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return round(max(0.0, float(row[0]) - position.commit_ts_ms / 1000), 3)


def check_lag(lag_s: float | None, bound: LagBound, snapshot_id: int) -> str | None:
    """``None`` within the bound; past it (or unknown while bounded) the warning to carry,
    or :class:`WarehouseLagError` when the bound refuses."""
    if bound.max_lag_s is None or (lag_s is not None and lag_s <= bound.max_lag_s):
        return None
    if lag_s is None:
        message = (
            f"the warehouse lag of snapshot {snapshot_id} is unknown (its position records no "
            f"source commit time) and curations are bounded to {bound.max_lag_s:g} s"
        )
    else:
        message = (
            f"snapshot {snapshot_id} is {lag_s:.3f} s behind the source, past the bound of "
            f"{bound.max_lag_s:g} s (curation.max_lag_s): the CDC writer is down, stalled or "
            "catching up; see `quarry cdc status`"
        )
    if bound.on_lag == "warn":
        return message
    raise WarehouseLagError(
        message,
        reason="warehouse_lag",
        warehouse_lag_s=lag_s,
        max_lag_s=bound.max_lag_s,
        snapshot_id=snapshot_id,
    )
