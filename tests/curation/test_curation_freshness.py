"""A curation's warehouse lag (source clock minus the commit time its position covers) and
the bound it is held to: refused, warned about, or let through."""

from __future__ import annotations

import pickle
import time
from typing import Any

import psycopg
import pytest

from curation.errors import WarehouseLagError
from curation.freshness import LagBound, check_lag, warehouse_lag_s
from warehouse.changes import Position


def test_lag_is_measured_on_the_source_clock(pg_conn: psycopg.Connection[Any]) -> None:
    ten_s_ago = int((time.time() - 10) * 1000)
    position = Position(lsn=1, snapshot_lsn=1, slot="s", commit_ts_ms=ten_s_ago)
    lag = warehouse_lag_s(position, pg_conn)
    assert lag is not None and 10 <= lag < 15
    assert warehouse_lag_s(None, pg_conn) is None
    assert warehouse_lag_s(Position(lsn=1, snapshot_lsn=1, slot="s"), pg_conn) is None
    future = Position(lsn=1, snapshot_lsn=1, slot="s", commit_ts_ms=ten_s_ago + 60_000)
    assert warehouse_lag_s(future, pg_conn) == 0.0  # never negative


def test_past_the_bound_is_refused_with_the_lag_and_the_bound() -> None:
    with pytest.raises(WarehouseLagError) as raised:
        check_lag(12.5, LagBound(max_lag_s=5.0), snapshot_id=9)
    error = raised.value
    assert error.status == 409 and error.retryable
    assert error.context == {
        "reason": "warehouse_lag",
        "warehouse_lag_s": 12.5,
        "max_lag_s": 5.0,
        "snapshot_id": 9,
    }
    assert "12.500 s behind the source, past the bound of 5 s" in error.message
    again = pickle.loads(pickle.dumps(error))
    assert again.context == error.context and again.message == error.message


def test_warn_builds_with_a_warning_and_unbounded_never_speaks() -> None:
    warning = check_lag(12.5, LagBound(max_lag_s=5.0, on_lag="warn"), snapshot_id=9)
    assert warning is not None and warning.startswith("snapshot 9 is 12.500 s behind")
    assert check_lag(4.0, LagBound(max_lag_s=5.0), snapshot_id=9) is None
    assert check_lag(1e6, LagBound(), snapshot_id=9) is None
    assert check_lag(None, LagBound(), snapshot_id=9) is None


def test_an_unknown_lag_under_a_bound_is_past_it() -> None:
    with pytest.raises(WarehouseLagError, match="lag of snapshot 3 is unknown") as raised:
        check_lag(None, LagBound(max_lag_s=5.0), snapshot_id=3)
    assert raised.value.context["warehouse_lag_s"] is None
    warning = check_lag(None, LagBound(max_lag_s=5.0, on_lag="warn"), snapshot_id=3)
    assert warning is not None and "unknown" in warning
