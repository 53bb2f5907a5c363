"""Prometheus metrics of the CDC writer: judged from Postgres, or read from a status file.

The service's ``/metrics`` registers :class:`LivenessCollector`: at every scrape it reads the
writer's liveness from Postgres (``cdc/liveness.py``: its report in ``cdc_writers``, its
slot's replication connection, the WAL position), so ``quarry_cdc_up`` and
``quarry_cdc_state`` tell a dead or stalled follower, on this machine or another, or a
stalled Debezium feed, within seconds; the follower's own figures (lag, throughput, slot lag,
totals) come from the status document it reports there. :class:`FollowerCollector` and
:func:`render` read a local status file instead (``python -m cdc follow --status F``), where
a stale file (``quarry_cdc_status_age_seconds`` growing, ``quarry_cdc_up`` 0) is how a
stalled or dead follower shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cdc.liveness import STATES, Liveness
from cdc.status import FollowerStatus, read_status

#: A status older than this (seconds) means the follower is not running.
STALE_AFTER_S = 5.0
_STATES = ("starting", "snapshotting", "streaming", "retrying", "failed", "stopped")
_RUNNING = ("starting", "snapshotting", "streaming")

# (name, status field, help); gauges in seconds or bytes as their names say.
_GAUGES = (
    (
        "lag_seconds",
        "lag_s",
        "Postgres commit to warehouse commit, oldest transaction of the last batch",
    ),
    ("max_lag_seconds", "max_lag_s", "Largest lag_seconds since the follower started"),
    ("rows_per_second", "rows_per_s", "Row changes applied per second over the last 10 s"),
    ("slot_lag_bytes", "slot_lag_bytes", "WAL written since the slot's confirmed position"),
    (
        "slot_lag_seconds",
        "slot_lag_s",
        "Seconds since the WAL passed the slot's confirmed position",
    ),
    ("slot_retained_bytes", "slot_retained_bytes", "WAL held by the slot from its restart point"),
    (
        "slot_restart_age_seconds",
        "slot_restart_age_s",
        "Seconds since the WAL passed the slot's restart point",
    ),
    ("last_batch_seconds", "last_batch_s", "Seconds the last warehouse commit took"),
    ("last_batch_changes", "last_batch_changes", "Row changes in the last batch"),
    ("snapshot_rows", "snapshot_rows", "Rows loaded by the initial snapshot"),
    ("snapshot_seconds", "snapshot_s", "Seconds the initial snapshot took"),
    ("maintenance_seconds", "maintenance_s", "Seconds the last warehouse maintenance took"),
)
_COUNTERS = (
    ("changes", "changes_total", "Row changes applied"),
    ("transactions", "transactions_total", "Source transactions applied"),
    ("batches", "batches_total", "Warehouse commits of change batches"),
    ("errors", "errors_total", "Errors the follower met (retried or fatal)"),
    ("maintenance_runs", "maintenance_total", "Warehouse maintenance runs"),
    ("tombstones_purged", "tombstones_purged_total", "Tombstones purged by maintenance"),
    ("backfilled_rows", "backfilled_rows", "Rows loaded for tables added to the publication"),
)


class FollowerCollector(Collector):
    """Reads the status file at every scrape; yields nothing but ``quarry_cdc_up 0`` when
    the follower never wrote one."""

    def __init__(self, status_path: Path) -> None:
        self._path = status_path

    def collect(self) -> Iterator[Metric]:
        yield from status_metrics(read_status(self._path))


def render(status: FollowerStatus | None, *, now: datetime | None = None) -> str:
    """The follower's metrics in the Prometheus text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(status, now))
    return generate_latest(registry).decode()


class _Fixed(Collector):
    def __init__(self, status: FollowerStatus | None, now: datetime | None) -> None:
        self._status, self._now = status, now

    def collect(self) -> Iterator[Metric]:
        yield from status_metrics(self._status, now=self._now)


def status_metrics(
    status: FollowerStatus | None, *, now: datetime | None = None
) -> Iterator[Metric]:
    """Metric families for one status (``None``: the follower never ran)."""
    up = GaugeMetricFamily("quarry_cdc_up", "1 while the follower runs and reports", labels=[])
    if status is None:
        up.add_metric([], 0)
        yield up
        return
    slot = [status.slot]
    age = _age_s(status.updated_at, now or datetime.now(UTC))
    running = status.state in _RUNNING and age <= STALE_AFTER_S
    up = GaugeMetricFamily(
        "quarry_cdc_up", "1 while the follower runs and reports", labels=["slot"]
    )
    up.add_metric(slot, 1 if running else 0)
    yield up
    state = GaugeMetricFamily("quarry_cdc_state", "Follower state", labels=["slot", "state"])
    for name in _STATES:
        state.add_metric([status.slot, name], 1 if status.state == name else 0)
    yield state
    stale = GaugeMetricFamily(
        "quarry_cdc_status_age_seconds",
        "Seconds since the status file was written",
        labels=["slot"],
    )
    stale.add_metric(slot, age)
    yield stale
    yield from _figures(status)


def _figures(status: FollowerStatus) -> Iterator[Metric]:
    """The follower's own gauges and counters (unknown figures left out)."""
    slot = [status.slot]
    for name, attribute, text in _GAUGES:
        value = getattr(status, attribute)
        if value is not None:
            gauge = GaugeMetricFamily(f"quarry_cdc_{name}", text, labels=["slot"])
            gauge.add_metric(slot, float(value))
            yield gauge
    for name, attribute, text in _COUNTERS:
        counter = CounterMetricFamily(f"quarry_cdc_{name}", text, labels=["slot"])
        counter.add_metric(slot, float(getattr(status, attribute)))
        yield counter


def _age_s(stamp: str, now: datetime) -> float:
    try:
        written = datetime.fromisoformat(stamp)
    except ValueError:
        return float("inf")
    return max(0.0, (now - written).total_seconds())


# (name, Liveness field, help), judged from Postgres at each scrape.
_LIVENESS_GAUGES = (
    ("last_seen_seconds", "last_seen_s", "Seconds since the CDC writer last reported"),
    ("last_advance_seconds", "last_advance_s", "Seconds since the warehouse position moved"),
    (
        "warehouse_lag_seconds",
        "warehouse_lag_s",
        "How far the warehouse's data is behind the source, at most",
    ),
    ("wal_behind_bytes", "wal_behind_bytes", "Source WAL written past the warehouse position"),
)


class LivenessCollector(Collector):
    """Reads the CDC writer's liveness (``read()``, which never raises: an unreadable
    source is a ``down`` judgement) at every scrape."""

    def __init__(self, read: Callable[[], Liveness]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield from liveness_metrics(self._read())


def liveness_metrics(liveness: Liveness) -> Iterator[Metric]:
    """``quarry_cdc_up`` and ``quarry_cdc_state`` as judged, the ages, and the follower's
    figures from the status document it reported (a Debezium feed: its error count)."""
    slot = [liveness.slot]
    up = GaugeMetricFamily(
        "quarry_cdc_up", "1 while the CDC writer streams and advances", labels=["slot"]
    )
    up.add_metric(slot, 1 if liveness.healthy else 0)
    yield up
    state = GaugeMetricFamily(
        "quarry_cdc_state", "CDC writer state, as judged", labels=["slot", "state"]
    )
    for name in STATES:
        state.add_metric([liveness.slot, name], 1 if liveness.state == name else 0)
    yield state
    for name, attribute, text in _LIVENESS_GAUGES:
        value = getattr(liveness, attribute)
        if value is not None:
            gauge = GaugeMetricFamily(f"quarry_cdc_{name}", text, labels=["slot"])
            gauge.add_metric(slot, float(value))
            yield gauge
    if liveness.status is not None:
        yield from _figures(FollowerStatus.from_dict(liveness.status))
    elif liveness.kind is not None:
        errors = CounterMetricFamily(
            "quarry_cdc_errors", "Errors the CDC writer met", labels=["slot"]
        )
        errors.add_metric(slot, float(liveness.errors_total))
        yield errors
