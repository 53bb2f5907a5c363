"""ClickHouse keeps every version of an episode and picks each key's newest at read time
(sql/warehouse/clickhouse/views.sql); a curation's filters are pushed into the scan of the
versions below that pick. These tests change columns a curation filters on and re-curate
through the service's build code: no older version comes back, and a rebuild at the first
build's pinned snapshot still gives the same bytes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from curation.build import (
    CurationLimits,
    CurationRequest,
    build_at,
    check_request,
    rebuild_manifest,
)
from tests.fixtures.clickhouse import ChdbEngine
from tests.warehouse.conftest import batch, event
from tests.warehouse.fleet import _episode, episode_id, fleet
from warehouse.backends import open_warehouse
from warehouse.base import Warehouse
from warehouse.changes import Op

LIMITS = CurationLimits(timeout_s=60)
SPEC = {"anchor_stride": 3, "action_horizon": 8, "state_history": 4}
# Episodes 6, 12, 18 and 24 of the fleet: robot r1, task t1, successful.
CURATION = "SELECT id, success FROM episodes WHERE robot_id = 'r1' AND task_id = 't1' AND success"


@pytest.fixture
def house(chdb: ChdbEngine) -> Iterator[Warehouse]:
    config = chdb.new_config()
    warehouse = open_warehouse(config)
    try:
        warehouse.bootstrap()
        for change in fleet():
            warehouse.apply(change)
        yield warehouse
    finally:
        warehouse.close()
        chdb.drop(config)


def curate(house: Warehouse, snapshot: int, out: Path) -> tuple[str, list[str], bytes]:
    checked, spec = check_request(CurationRequest(CURATION, SPEC))
    info, _, lineage = build_at(checked, spec, snapshot, house, LIMITS, out)
    ids = sorted(str(i) for i in lineage["episode_id"].to_pylist())
    return info.manifest_id, ids, info.path.read_bytes()


def test_a_pushed_down_filter_never_resurrects_an_older_version(
    house: Warehouse, tmp_path: Path
) -> None:
    before = house.current_snapshot()
    first_id, first, first_bytes = curate(house, before, tmp_path / "first")
    assert first == sorted(episode_id(i) for i in (6, 12, 18, 24))
    # Episode 6 stops being a success, episode 12 moves to another task (a column the
    # curation filters on and that is not supposed to change), episode 18 changes neither.
    house.apply(
        batch(
            event(Op.UPDATE, "episodes", 8000, 1, after={**_episode(6), "success": False}),
            event(Op.UPDATE, "episodes", 8000, 2, after={**_episode(12), "task_id": "t2"}),
            event(Op.UPDATE, "episodes", 8000, 3, after={**_episode(18), "steps": 7}),
        )
    )
    after = house.current_snapshot()
    assert after > before
    _, now, _ = curate(house, after, tmp_path / "after")
    assert now == sorted(episode_id(i) for i in (18, 24))
    rows = house.query_arrow(
        "SELECT id, success, task_id, steps FROM episodes WHERE id IN "
        f"('{episode_id(6)}', '{episode_id(12)}', '{episode_id(18)}') ORDER BY steps",
        snapshot_id=after,
    ).to_pylist()
    assert len(rows) == 3, "one row per key"
    assert {(r["success"], r["task_id"]) for r in rows} == {
        (False, "t1"),
        (True, "t2"),
        (True, "t1"),
    }
    again_id, again, again_bytes = curate(house, before, tmp_path / "again")
    assert (again_id, again, again_bytes) == (first_id, first, first_bytes)


def test_a_rebuild_at_the_pinned_snapshot_is_byte_identical_after_changes(
    house: Warehouse, tmp_path: Path
) -> None:
    checked, spec = check_request(CurationRequest(CURATION, SPEC))
    info, meta, _ = build_at(checked, spec, house.current_snapshot(), house, LIMITS, tmp_path)
    for n in range(3):  # three more versions of every selected episode
        house.apply(
            batch(
                *(
                    event(
                        Op.UPDATE, "episodes", 9000 + 100 * n, i, after={**_episode(i), "steps": n}
                    )
                    for i in (6, 12, 18)
                )
            )
        )
    rebuilt = rebuild_manifest(info.manifest_id, meta, house, tmp_path / "rebuilt", LIMITS)
    assert rebuilt.identical
