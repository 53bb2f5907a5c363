"""A reprocess, as CDC carries it (migration 0008: the ``episodes`` row moves to the new
container version, its statistics and flags are replaced), changes no old manifest: each
rebuilds byte-identical at its pinned snapshot on DuckLake and on ClickHouse (chDB), while a
new curation lists the new container's URI, size and SHA-256, and its stamp."""

from __future__ import annotations

from pathlib import Path

from curation.build import CurationLimits, CurationRequest, build_at, check_request
from curation.build import rebuild_manifest as rebuild
from manifests.manifest import open_manifest
from tests.warehouse.conftest import batch, event
from tests.warehouse.fleet import _episode, episode_id, fleet
from warehouse.backends import open_warehouse
from warehouse.changes import ChangeBatch, Op
from warehouse.config import WarehouseConfig

LIMITS = CurationLimits(timeout_s=60)
SPEC = {"anchor_stride": 3, "action_horizon": 8, "state_history": 4}
CURATIONS = [
    "SELECT * FROM episodes",
    "SELECT id, task_id FROM episodes WHERE pipeline_version < 3",
]
REPROCESSED = (1, 4, 7)


def new_uri(i: int) -> str:
    return f"objects/r{i % 3 + 1}/{episode_id(i)}/{'ab' * 8}.mcap"


def reprocess(lsn: int) -> ChangeBatch:
    """What registering a new container version writes, for the episodes ``REPROCESSED``."""
    events = []
    for n, i in enumerate(REPROCESSED):
        row = {**_episode(i), "uri": new_uri(i), "sha256": "ab" * 32, "size_bytes": 5000 + i}
        events.append(event(Op.UPDATE, "episodes", lsn, n, after={**row, "pipeline_version": 3}))
        for dim in range(2):
            stats = {"episode_id": episode_id(i), "field": "state", "dim": dim, "count": 99}
            stats |= {"sum": 9.0 + dim, "sum_sq": 90.0, "min": -9.0, "max": 9.0}
            events.append(event(Op.UPDATE, "episode_stats", lsn, 10 + 2 * n + dim, after=stats))
    return batch(*events)


def test_old_manifests_rebuild_identical_after_a_reprocess(
    configs: dict[str, WarehouseConfig], tmp_path: Path
) -> None:
    for name, config in configs.items():
        wh = open_warehouse(config)
        try:
            wh.bootstrap()
            for change in fleet():
                wh.apply(change)
            built = {}
            for sql in CURATIONS:
                checked, spec = check_request(CurationRequest(sql, SPEC))
                info, meta, _ = build_at(
                    checked, spec, wh.current_snapshot(), wh, LIMITS, tmp_path / name
                )
                built[sql] = (info.manifest_id, meta)
            wh.apply(reprocess(9000))
            for sql, (manifest_id, meta) in built.items():
                again = rebuild(manifest_id, meta, wh, tmp_path / f"again-{name}", LIMITS)
                assert again.identical, (name, sql)
            checked, spec = check_request(CurationRequest(CURATIONS[0], SPEC))
            info, _, _ = build_at(
                checked, spec, wh.current_snapshot(), wh, LIMITS, tmp_path / f"new-{name}"
            )
            assert info.manifest_id != built[CURATIONS[0]][0]
            table = open_manifest(tmp_path / f"new-{name}" / f"{info.manifest_id}.arrow")
            rows = table.batch(0).to_pylist()
            by_id = {r["episode_id"]: r for r in rows}
            for i in REPROCESSED:
                row = by_id[episode_id(i)]
                assert (row["uri"], row["sha256"], row["pipeline_version"]) == (
                    new_uri(i),
                    "ab" * 32,
                    3,
                ), name
        finally:
            wh.close()
