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
from warehouse.rows import text_value
from warehouse.sqlfiles import SQL_ROOT

FLAGS = ("camera_blackout", "choppy_joints", "dropped_frames", "gripper_stuck")
AGGREGATE = (
    "SELECT CAST(f.episode_id AS VARCHAR) AS episode_id, e.robot_id, e.task_id, "
    "list_sort(list(f.flag)) AS flags FROM mirror.episode_quality_flags AS f "
    "LEFT JOIN mirror.episodes AS e ON e.id = f.episode_id AND NOT e._deleted "
    "WHERE NOT f._deleted GROUP BY f.episode_id, e.robot_id, e.task_id ORDER BY 1"
)
LISTS = (
    "SELECT CAST(episode_id AS VARCHAR) AS episode_id, robot_id, task_id, "
    "quality_flags AS flags FROM mirror.episode_flag_lists ORDER BY 1"
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


def test_lists_follow_every_kind_of_flag_and_episode_change(
    warehouse: DuckLakeWarehouse,
) -> None:
    """Random batches of flag inserts, deletes and renames, episodes that move to another
    robot or task, new episodes with their flags in the same batch, a truncate; after each,
    the lists are the aggregate of the live flags with their episode's robot and task."""
    episodes = {e["id"]: e for e in (episode_row() for _ in range(6))}
    warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            *(
                event(Op.CREATE, "episodes", 100, 2 + i, after=e)
                for i, e in enumerate(episodes.values())
            ),
        )
    )
    live: set[tuple[str, str]] = set()  # (episode, flag)
    pick = random.Random(7)
    lsn = 200
    for step in range(14):
        events = []
        ids = list(episodes)
        for seq in range(1, pick.randint(1, 6) + 1):
            key = (pick.choice(ids), pick.choice(FLAGS))
            free = [f for f in FLAGS if (key[0], f) not in live]
            if key in live and (pick.random() < 0.5 or not free):
                events.append(
                    event(Op.DELETE, "episode_quality_flags", lsn, seq, before=flag(*key))
                )
                live.discard(key)
            elif key in live:  # an update that renames the flag: the old key is tombstoned
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
                live.discard(key)
                live.add(new)
            else:
                events.append(event(Op.CREATE, "episode_quality_flags", lsn, seq, after=flag(*key)))
                live.add(key)
        if step % 3 == 1:  # an episode moves to another robot or task
            moved = pick.choice(ids)
            place = pick.choice([{"robot_id": "r2"}, {"task_id": "t9"}, {"robot_id": "r1"}])
            episodes[moved] = {**episodes[moved], **place}
            events.append(event(Op.UPDATE, "episodes", lsn, 20, after=episodes[moved]))
        if step % 4 == 2:  # a new episode and its first flags, in one transaction
            fresh = episode_row(robot_id="r3", task_id="t2")
            episodes[fresh["id"]] = fresh
            events.append(event(Op.CREATE, "episodes", lsn, 30, after=fresh))
            for n, name in enumerate(FLAGS[:2]):
                events.append(
                    event(
                        Op.CREATE,
                        "episode_quality_flags",
                        lsn,
                        31 + n,
                        after=flag(fresh["id"], name),
                    )
                )
                live.add((fresh["id"], name))
        if step == 9:  # a truncate mid-batch, and a flag written after it
            events.append(event(Op.TRUNCATE, "episode_quality_flags", lsn, 50))
            first = next(iter(episodes))
            events.append(
                event(Op.CREATE, "episode_quality_flags", lsn, 51, after=flag(first, FLAGS[1]))
            )
            live = {(first, FLAGS[1])}
        warehouse.apply(batch(*events))
        want: dict[str, list[str]] = {}
        for episode, name in sorted(live):
            want.setdefault(episode, []).append(name)
        assert lists(warehouse) == expected(warehouse), step
        stored = {
            r["episode_id"]: (r["robot_id"], r["task_id"], r["flags"]) for r in lists(warehouse)
        }
        assert stored == {
            e: (episodes[e]["robot_id"], episodes[e]["task_id"], names) for e, names in want.items()
        }, step
        assert view_flags(warehouse) == {e: want.get(e, []) for e in episodes}, step
        lsn += 100

    # A re-delivered insert from before the truncate changes neither the flags nor the lists,
    # and a re-delivered older version of a moved episode does not move its list back.
    before = lists(warehouse)
    first = next(iter(episodes))
    warehouse.apply(
        batch(
            event(Op.CREATE, "episode_quality_flags", 250, 1, after=flag(first, FLAGS[3])),
            event(Op.UPDATE, "episodes", 250, 2, after={**episodes[first], "robot_id": "r7"}),
        )
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
    assert lists(warehouse) == [
        {"episode_id": b["id"], "robot_id": "r1", "task_id": "t1", "flags": [FLAGS[1], FLAGS[3]]}
    ]
    assert lists(warehouse) == expected(warehouse)
    assert view_flags(warehouse) == {a["id"]: [], b["id"]: [FLAGS[1], FLAGS[3]]}
    # A snapshot of the episodes that moves b to another robot: its list follows.
    moved = {**b, "robot_id": "r2"}
    texts = {c: text_value(moved[c]) for c in moved}
    rows = pa.table({c: [None if v is None else v.decode()] for c, v in texts.items()})
    warehouse.apply_snapshot(
        ["episodes"],
        [SnapshotChunk("episodes", rows)],
        Position(lsn=2000, snapshot_lsn=2000, slot="s"),
    )
    assert [(r["episode_id"], r["robot_id"]) for r in lists(warehouse)] == [(b["id"], "r2")]
    assert lists(warehouse) == expected(warehouse)
    assert view_flags(warehouse) == {b["id"]: [FLAGS[1], FLAGS[3]]}


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
