"""``mirror.episode_flag_lists`` (warehouse migration 0008) stays equal to the aggregate of
the live flags after every kind of change, in the same commit; pinned reads see the lists of
their snapshot; a lake from before the migration gets its lists backfilled, and the manifests
it built rebuild byte-identical."""

from __future__ import annotations

import random
import shutil
import uuid
from pathlib import Path

import pyarrow as pa

from curation.build import CurationLimits, CurationRequest, build_at, check_request
from curation.build import rebuild_manifest as rebuild
from tests.warehouse.conftest import batch, episode_row, event, robot
from tests.warehouse.fleet import fleet
from warehouse.changes import Op, Position, SnapshotChunk
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.sqlfiles import SQL_ROOT

FLAGS = ("camera_blackout", "choppy_joints", "dropped_frames", "gripper_stuck")
AGGREGATE = (
    "SELECT CAST(episode_id AS VARCHAR) AS episode_id, list_sort(list(flag)) AS flags "
    "FROM mirror.episode_quality_flags WHERE NOT _deleted GROUP BY episode_id ORDER BY 1"
)
LISTS = (
    "SELECT CAST(episode_id AS VARCHAR) AS episode_id, quality_flags AS flags "
    "FROM mirror.episode_flag_lists ORDER BY 1"
)
DATA = Path(__file__).parent / "data"


def lists(lake: DuckLakeWarehouse, snapshot_id: int | None = None) -> list[dict[str, object]]:
    return lake.query_arrow(LISTS, snapshot_id=snapshot_id).to_pylist()


def expected(lake: DuckLakeWarehouse) -> list[dict[str, object]]:
    return lake.query_arrow(AGGREGATE).to_pylist()


def view_flags(lake: DuckLakeWarehouse, snapshot_id: int | None = None) -> dict[str, list[str]]:
    rows = lake.query_arrow("SELECT id, quality_flags FROM episodes", snapshot_id=snapshot_id)
    return {r["id"]: r["quality_flags"] for r in rows.to_pylist()}


def flag(episode: str, name: str) -> dict[str, str]:
    return {"episode_id": episode, "flag": name, "detail": "{}"}


def test_lists_follow_every_kind_of_flag_change(warehouse: DuckLakeWarehouse) -> None:
    episodes = [episode_row() for _ in range(6)]
    ids = [e["id"] for e in episodes]
    warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            *(event(Op.CREATE, "episodes", 100, 2 + i, after=e) for i, e in enumerate(episodes)),
        )
    )
    live: dict[tuple[str, str], int] = {}  # (episode, flag) -> the lsn that wrote it
    pick = random.Random(7)
    lsn = 200
    for step in range(12):
        events = []
        for seq in range(1, pick.randint(1, 6) + 1):
            key = (pick.choice(ids), pick.choice(FLAGS))
            if key in live and pick.random() < 0.5:
                events.append(
                    event(Op.DELETE, "episode_quality_flags", lsn, seq, before=flag(*key))
                )
                del live[key]
            elif key in live:  # an update that renames the flag: the old key is tombstoned
                free = [f for f in FLAGS if (key[0], f) not in live]
                if not free:
                    continue
                new = (key[0], pick.choice(free))
                events.append(
                    event(
                        Op.UPDATE,
                        "episode_quality_flags",
                        lsn,
                        seq,
                        before=flag(*key),
                        after=flag(*new),
                    )
                )
                del live[key]
                live[new] = lsn
            else:
                events.append(event(Op.CREATE, "episode_quality_flags", lsn, seq, after=flag(*key)))
                live[key] = lsn
        if step == 8:  # a truncate mid-batch, and a flag written after it
            events.append(event(Op.TRUNCATE, "episode_quality_flags", lsn, 50))
            events.append(
                event(Op.CREATE, "episode_quality_flags", lsn, 51, after=flag(ids[0], FLAGS[1]))
            )
            live = {(ids[0], FLAGS[1]): lsn}
        warehouse.apply(batch(*events))
        want: dict[str, list[str]] = {}
        for episode, name in sorted(live):
            want.setdefault(episode, []).append(name)
        assert lists(warehouse) == expected(warehouse), step
        assert {r["episode_id"]: r["flags"] for r in lists(warehouse)} == want, step
        assert view_flags(warehouse) == {e: want.get(e, []) for e in ids}, step
        lsn += 100

    # A re-delivered insert from before the truncate changes neither the flags nor the lists.
    before = lists(warehouse)
    warehouse.apply(
        batch(event(Op.CREATE, "episode_quality_flags", 250, 1, after=flag(ids[5], FLAGS[3])))
    )
    assert lists(warehouse) == before == expected(warehouse)


def test_a_snapshot_load_rebuilds_the_lists(warehouse: DuckLakeWarehouse) -> None:
    a, b = episode_row(), episode_row()
    warehouse.apply(
        batch(
            event(Op.CREATE, "episodes", 100, 1, after=a),
            event(Op.CREATE, "episodes", 100, 2, after=b),
            event(Op.CREATE, "episode_quality_flags", 100, 3, after=flag(a["id"], FLAGS[2])),
            event(Op.CREATE, "episode_quality_flags", 100, 4, after=flag(b["id"], FLAGS[0])),
        )
    )
    rows = pa.table(
        {
            "episode_id": [b["id"], b["id"]],
            "flag": [FLAGS[3], FLAGS[1]],
            "detail": ["{}", "{}"],
        }
    )
    position = Position(lsn=1000, snapshot_lsn=1000, slot="s")
    warehouse.apply_snapshot(
        ["episode_quality_flags"], [SnapshotChunk("episode_quality_flags", rows)], position
    )
    # a's flag was not in the snapshot: tombstoned, and its list gone with it.
    assert lists(warehouse) == [{"episode_id": b["id"], "flags": [FLAGS[1], FLAGS[3]]}]
    assert lists(warehouse) == expected(warehouse)
    assert view_flags(warehouse) == {a["id"]: [], b["id"]: [FLAGS[1], FLAGS[3]]}


def test_pinned_reads_see_the_lists_of_their_snapshot(warehouse: DuckLakeWarehouse) -> None:
    a = episode_row()
    first = warehouse.apply(
        batch(
            event(Op.CREATE, "episodes", 100, 1, after=a),
            event(Op.CREATE, "episode_quality_flags", 100, 2, after=flag(a["id"], FLAGS[1])),
        )
    )
    second = warehouse.apply(
        batch(
            event(Op.CREATE, "episode_quality_flags", 200, 1, after=flag(a["id"], FLAGS[0])),
            event(Op.DELETE, "episode_quality_flags", 200, 2, before=flag(a["id"], FLAGS[1])),
        )
    )
    assert view_flags(warehouse, first) == {a["id"]: [FLAGS[1]]}
    assert view_flags(warehouse, second) == {a["id"]: [FLAGS[0]]}
    # The lists' changes move the data version of the views that read them.
    assert warehouse.data_version(["episodes"]) == second


def before_0008(folder: Path) -> Path:
    """DuckLake's SQL files of the release before migration 0008: without it, and with the
    views file of that release (the flags aggregated in the view)."""
    out = folder / "ducklake"
    shutil.copytree(SQL_ROOT / "ducklake", out)
    (out / "0008_episode_flag_lists.sql").unlink()
    shutil.copy(DATA / "ducklake_views_before_0008.sql", out / "views.sql")
    return out


def test_a_lake_from_before_gets_its_lists_and_old_manifests_rebuild(
    warehouse_config: WarehouseConfig, tmp_path: Path
) -> None:
    limits = CurationLimits(timeout_s=60)
    spec = {"anchor_stride": 3, "action_horizon": 8, "state_history": 4}
    curations = [
        "SELECT * FROM episodes",
        "SELECT id, quality_flags FROM episodes WHERE len(quality_flags) = 0",
        "SELECT id FROM episodes WHERE list_contains(quality_flags, 'choppy_joints')",
    ]
    old = DuckLakeWarehouse(warehouse_config, sql_dir=before_0008(tmp_path / "old"))  # type: ignore[arg-type]
    built = {}
    try:
        old.bootstrap()
        for change in fleet():
            old.apply(change)
        for sql in curations:
            checked, sample_spec = check_request(CurationRequest(sql, spec))
            info, meta, lineage = build_at(
                checked, sample_spec, old.current_snapshot(), old, limits, tmp_path / "old-m"
            )
            built[sql] = (info.manifest_id, meta, lineage["episode_id"].to_pylist())
    finally:
        old.close()

    new = DuckLakeWarehouse(warehouse_config)  # type: ignore[arg-type]
    try:
        new.bootstrap()
        assert lists(new) and lists(new) == expected(new)
        extra = str(uuid.uuid4())
        new.apply(
            batch(
                event(Op.CREATE, "episodes", 9000, 1, after=episode_row(extra)),
                event(Op.CREATE, "episode_quality_flags", 9000, 2, after=flag(extra, FLAGS[1])),
            )
        )
        assert lists(new) == expected(new)
        for sql in curations:
            manifest_id, meta, episodes = built[sql]
            again = rebuild(manifest_id, meta, new, tmp_path / "again", limits)
            assert again.identical, sql
            checked, sample_spec = check_request(CurationRequest(sql, spec))
            _, _, lineage = build_at(
                checked, sample_spec, new.current_snapshot(), new, limits, tmp_path / "new-m"
            )
            now = set(lineage["episode_id"].to_pylist())
            if "choppy" in sql:
                assert now == {*episodes, extra}, sql
            else:
                assert now - {extra} == set(episodes), sql
    finally:
        new.close()
