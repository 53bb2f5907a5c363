"""The instruction column arrives without changing old manifests: a warehouse bootstrapped
from the SQL files of the release before it (no ``instruction`` in the mirror, no
``episode_instructions`` view) builds manifests; the new release's files are applied, CDC
brings episodes that carry an instruction; each old manifest still rebuilds byte-identical at
its pinned snapshot, on DuckLake and on ClickHouse (chDB), and the new view curates by
instruction on both."""

from __future__ import annotations

import shutil
from pathlib import Path

from curation.build import CurationLimits, CurationRequest, build_at, check_request
from curation.build import rebuild_manifest as rebuild
from tests.warehouse.conftest import batch, event
from tests.warehouse.fleet import _episode, episode_id, fleet
from warehouse.base import Warehouse
from warehouse.changes import ChangeBatch, Op
from warehouse.clickhouse.backend import ClickHouseWarehouse
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.sqlfiles import SQL_ROOT

LIMITS = CurationLimits(timeout_s=60)
SPEC = {"anchor_stride": 3, "action_horizon": 8, "state_history": 4}
OLD_CURATIONS = [
    "SELECT * FROM episodes",
    "SELECT id, task_id, robot_model FROM episodes WHERE success AND site = 'lab'",
]
NEW_FILES = {
    "ducklake": "0005_episode_instruction.sql",
    "clickhouse": "0002_episode_instruction.sql",
}


def previous_release(backend: str, folder: Path) -> Path:
    """The backend's SQL files as they were before the instruction: without its migration
    and without the view statement that reads it."""
    out = folder / backend
    shutil.copytree(SQL_ROOT / backend, out)
    (out / NEW_FILES[backend]).unlink()
    views = (out / "views.sql").read_text().split(";\n\n")
    kept = [s for s in views if "episode_instructions" not in s]
    assert len(kept) == len(views) - 1
    (out / "views.sql").write_text(";\n\n".join(kept))
    return out


def open_backend(config: WarehouseConfig, sql_dir: Path | None) -> Warehouse:
    if config.backend == "clickhouse":
        return ClickHouseWarehouse(config, sql_dir=sql_dir)  # type: ignore[arg-type]
    return DuckLakeWarehouse(config, sql_dir=sql_dir)  # type: ignore[arg-type]


def with_instructions(lsn: int) -> ChangeBatch:
    rows = [
        event(Op.CREATE, "episodes", lsn, n, after={**_episode(i), "instruction": text})
        for n, (i, text) in enumerate(((40, "open the drawer"), (41, "pick up the cube")))
    ]
    update = {**_episode(6), "instruction": "open the drawer"}
    return batch(*rows, event(Op.UPDATE, "episodes", lsn, 9, after=update))


def test_old_manifests_rebuild_identical_after_the_column(
    configs: dict[str, WarehouseConfig], tmp_path: Path
) -> None:
    built = {}
    for name, config in configs.items():
        old = open_backend(config, previous_release(name, tmp_path / "old"))
        try:
            old.bootstrap()
            for change in fleet():
                old.apply(change)
            assert "instruction" not in dict(old.describe_tables()["episodes"].columns)
            for sql in OLD_CURATIONS:
                checked, spec = check_request(CurationRequest(sql, SPEC))
                info, meta, _ = build_at(
                    checked, spec, old.current_snapshot(), old, LIMITS, tmp_path / name
                )
                built[name, sql] = (info.manifest_id, meta)
        finally:
            old.close()
    for sql in OLD_CURATIONS:
        assert built["ducklake", sql][0] == built["clickhouse", sql][0]

    for name, config in configs.items():
        new = open_backend(config, None)
        try:
            new.bootstrap()
            assert dict(new.describe_tables()["episodes"].columns)["instruction"] == "VARCHAR"
            new.apply(with_instructions(9000))
            for sql in OLD_CURATIONS:
                manifest_id, meta = built[name, sql]
                again = rebuild(manifest_id, meta, new, tmp_path / f"again-{name}", LIMITS)
                assert again.identical, (name, sql)
            sql = (
                "SELECT e.* FROM episodes AS e JOIN episode_instructions AS i "
                "ON i.episode_id = e.id WHERE i.instruction = 'open the drawer'"
            )
            checked, spec = check_request(CurationRequest(sql, SPEC))
            _, _, lineage = build_at(
                checked, spec, new.current_snapshot(), new, LIMITS, tmp_path / f"new-{name}"
            )
            ids = lineage["episode_id"].to_pylist()
            assert ids == sorted([episode_id(40), episode_id(6)]), name
        finally:
            new.close()
