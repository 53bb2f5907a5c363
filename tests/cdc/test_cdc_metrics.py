"""Prometheus metrics rendered from the follower's status file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cdc.metrics import FollowerCollector, render
from cdc.status import FollowerStatus, write_status


def samples(text: str) -> dict[str, float]:
    return {
        sample.name + "".join(f"|{v}" for k, v in sorted(sample.labels.items()) if k != "slot"): (
            sample.value
        )
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_of_a_streaming_follower() -> None:
    status = FollowerStatus(
        slot="quarry_cdc",
        state="streaming",
        lag_s=0.42,
        rows_per_s=5000.0,
        changes_total=123,
        batches_total=7,
        errors_total=1,
        slot_lag_bytes=4096,
        slot_lag_s=0.5,
        slot_retained_bytes=65536,
        slot_restart_age_s=12.0,
    )
    now = datetime.fromisoformat(status.updated_at) + timedelta(seconds=1)
    got = samples(render(status, now=now))
    assert got["quarry_cdc_up"] == 1 and got["quarry_cdc_state|streaming"] == 1
    assert got["quarry_cdc_lag_seconds"] == 0.42 and got["quarry_cdc_rows_per_second"] == 5000
    assert got["quarry_cdc_changes_total"] == 123 and got["quarry_cdc_batches_total"] == 7
    assert got["quarry_cdc_errors_total"] == 1
    assert got["quarry_cdc_slot_lag_bytes"] == 4096 and got["quarry_cdc_slot_lag_seconds"] == 0.5
    assert got["quarry_cdc_slot_restart_age_seconds"] == 12.0
    assert got["quarry_cdc_status_age_seconds"] == 1.0
    assert "quarry_cdc_snapshot_rows" not in got  # unknown figures are left out


def test_a_stale_or_missing_status_reads_as_down(tmp_path: Path) -> None:
    registry = CollectorRegistry(auto_describe=False)
    path = tmp_path / "cdc.json"
    registry.register(FollowerCollector(path))
    assert samples(generate_latest(registry).decode()) == {"quarry_cdc_up": 0}
    write_status(path, FollowerStatus(slot="s", state="streaming"))
    assert samples(generate_latest(registry).decode())["quarry_cdc_up"] == 1
    later = datetime.now(UTC) + timedelta(minutes=1)
    status = FollowerStatus(slot="s", state="streaming")
    assert samples(render(status, now=later))["quarry_cdc_up"] == 0
