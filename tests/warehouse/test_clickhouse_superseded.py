"""ClickHouse's live views are the mirrored versions minus each table's list of superseded
versions (sql/warehouse/clickhouse/0005_superseded.sql, warehouse/clickhouse/superseded.py).
These tests hold the lists to the definition they replace: per key, the newest version
committed by the snapshot, unless it is a tombstone, computed here with a window over the raw
mirrored rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from clickhouse_connect.driver.client import Client

from tests.fixtures.clickhouse import ChdbEngine
from tests.warehouse.conftest import KEYS, Event, batch, episode_row, event, robot
from warehouse.backends import open_warehouse
from warehouse.base import Warehouse
from warehouse.changes import Op, Position, SnapshotChunk
from warehouse.clickhouse.backend import ClickHouseWarehouse
from warehouse.clickhouse.schema import SQL_DIR, Databases, quote, render_file
from warehouse.clickhouse.superseded import list_name
from warehouse.sqlfiles import sql_files

MIGRATION = "0005_superseded.sql"
#: Every table that has a live view, and so a list.
TABLES = (
    "robots",
    "tasks",
    "episodes",
    "episode_quality_flags",
    "episode_labels",
    "episode_stats",
    "episode_evaluations",
    "manifests",
)
#: Each curation view, ordered by its key (ClickHouse-dialect SQL).
VIEWS = {
    "robots": "SELECT * FROM robots ORDER BY id",
    "tasks": "SELECT * FROM tasks ORDER BY id",
    "episodes": "SELECT * FROM episodes ORDER BY id",
    "episode_quality_flags": "SELECT * FROM episode_quality_flags ORDER BY episode_id, flag",
    "episode_labels": "SELECT * FROM episode_labels ORDER BY id",
    "episode_stats": "SELECT * FROM episode_stats ORDER BY episode_id, field, dim",
    "episode_evaluations": "SELECT * FROM episode_evaluations ORDER BY checkpoint_id, episode_id",
    "manifests": "SELECT * FROM manifests ORDER BY id",
}
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def key_of(table: str) -> tuple[str, ...]:
    return KEYS.get(table, ("id",))


@pytest.fixture
def house(chdb: ChdbEngine) -> Iterator[ClickHouseWarehouse]:
    config = chdb.new_config(snapshot_retain_s=0.0)
    warehouse = open_warehouse(config)
    assert isinstance(warehouse, ClickHouseWarehouse)
    try:
        warehouse.bootstrap()
        yield warehouse
    finally:
        warehouse.close()
        chdb.drop(config)


# -- rows of every table --------------------------------------------------------------------


def _flag(episode: str, flag: str, detail: str = "{}") -> dict[str, Any]:
    return {"episode_id": episode, "flag": flag, "detail": detail}


def _label(label: int, episode: str, value: str) -> dict[str, Any]:
    return {
        "id": label,
        "episode_id": episode,
        "key": "segment",
        "value": value,
        "start_ns": 0,
        "end_ns": 10,
        "author": "ann",
        "created_at": T0,
    }


def _stat(episode: str, dim: int, count: int) -> dict[str, Any]:
    values = {"count": count, "sum": 1.5 * count, "sum_sq": 3.0, "min": 0.0, "max": 2.0}
    return {"episode_id": episode, "field": "state", "dim": dim, **values}


def _evaluation(checkpoint: str, episode: str, success: bool) -> dict[str, Any]:
    return {
        "checkpoint_id": checkpoint,
        "episode_id": episode,
        "manifest_id": "m1",
        "success": success,
        "scores": '{"reward": 1}',
        "evaluation_id": "ev1",
        "run_id": "run1",
        "created_at": T0,
    }


def _task(task: str, description: str) -> dict[str, Any]:
    return {"id": task, "description": description, "created_at": T0}


def _manifest(manifest: str, rows: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": manifest, "reuse_key": "k", "sql": "SELECT 1"}
    # snapshot 0 is no commit: the manifest protects none from maintenance
    row |= {"sample_spec": "{}", "snapshot_id": 0, "cdc_position": "", "rows": rows}
    return row | {"samples": rows, "size_bytes": 1, "uri": "u", "author": "ann", "created_at": T0}


def _upsert(table: str, lsn: int, seq: int, row: dict[str, Any]) -> Event:
    return event(Op.UPDATE, table, lsn, seq, after=row)


def _delete(table: str, lsn: int, seq: int, row: dict[str, Any]) -> Event:
    return event(Op.DELETE, table, lsn, seq, before={k: row[k] for k in key_of(table)})


def history(episodes: list[str]) -> Iterator[list[Event]]:
    """Batches of inserts, updates (of a key more than once, and in later batches), deletes
    and a re-insert after a delete, touching every table."""
    a, b, c = episodes
    yield [
        _upsert("robots", 100, 1, robot("r1")),
        _upsert("robots", 100, 2, robot("r2")),
        _upsert("tasks", 100, 3, _task("t1", "pick")),
        *(_upsert("episodes", 100, 4 + i, episode_row(e)) for i, e in enumerate(episodes)),
        _upsert("episode_quality_flags", 100, 10, _flag(a, "choppy_joints")),
        _upsert("episode_quality_flags", 100, 11, _flag(b, "camera_blackout")),
        _upsert("episode_labels", 100, 12, _label(1, a, "reach")),
        _upsert("episode_labels", 100, 13, _label(2, b, "grasp")),
        _upsert("episode_stats", 100, 14, _stat(a, 0, 10)),
        _upsert("episode_stats", 100, 15, _stat(a, 1, 10)),
        _upsert("episode_evaluations", 100, 16, _evaluation("ck1", a, True)),
        _upsert("episode_evaluations", 100, 17, _evaluation("ck1", b, False)),
        _upsert("manifests", 100, 18, _manifest("m1", 1)),
    ]
    yield [
        _upsert("robots", 200, 1, robot("r1", model="arm-2")),
        _upsert("tasks", 200, 2, _task("t1", "pick and place")),
        _upsert("episodes", 200, 3, episode_row(a, success=False)),
        _upsert("episodes", 200, 4, episode_row(b, steps=7)),
        _upsert("episode_quality_flags", 200, 5, _flag(a, "choppy_joints", '{"n": 2}')),
        _upsert("episode_labels", 200, 6, _label(1, a, "reach-2")),
        _upsert("episode_stats", 200, 7, _stat(a, 0, 11)),
        _upsert("episode_evaluations", 200, 8, _evaluation("ck1", a, False)),
        _upsert("manifests", 200, 9, _manifest("m1", 2)),
    ]
    yield [
        _delete("robots", 300, 1, robot("r2")),
        _upsert("episodes", 300, 2, episode_row(a, success=True, steps=3)),
        _delete("episodes", 300, 3, episode_row(c)),
        _delete("episode_quality_flags", 300, 4, _flag(b, "camera_blackout")),
        _delete("episode_labels", 300, 5, _label(2, b, "grasp")),
        _delete("episode_stats", 300, 6, _stat(a, 1, 10)),
        _delete("episode_evaluations", 300, 7, _evaluation("ck1", b, False)),
        _upsert("episode_evaluations", 300, 8, _evaluation("ck2", b, True)),
    ]
    yield [  # re-inserts after deletes, and an older replay the guard drops
        _upsert("robots", 400, 1, robot("r2", model="arm-3")),
        _upsert("episodes", 400, 2, episode_row(c, operator="bo")),
        _upsert("episode_quality_flags", 400, 3, _flag(b, "camera_blackout", '{"again": 1}')),
        _upsert("episode_stats", 400, 4, _stat(a, 1, 12)),
        _upsert("episodes", 150, 5, episode_row(b, steps=99)),
    ]


def _version_sql(table: str) -> tuple[str, str]:
    keys = ", ".join(quote(k) for k in key_of(table))
    return keys, f"{keys}, _lsn, _seq, _commit"


def live_versions(client: Client, names: Databases, table: str, snapshot: int) -> list[Any]:
    """The versions ``live_<table>`` shows at ``snapshot``."""
    _, columns = _version_sql(table)
    view = names.ident(names.meta, f"live_{table}")
    sql = f"SELECT {columns} FROM {view}(snapshot = {{s:UInt64}}) ORDER BY {columns}"
    return list(client.query(sql, parameters={"s": snapshot}).result_rows)


def newest_versions(client: Client, names: Databases, table: str, snapshot: int) -> list[Any]:
    """The definition: per key, the newest version committed by ``snapshot``, unless it is a
    tombstone (a window over the raw mirrored rows)."""
    keys, columns = _version_sql(table)
    sql = (
        f"SELECT {columns} FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
        "ORDER BY _lsn DESC, _seq DESC) AS _rank "
        f"FROM {names.ident(names.mirror, table)} WHERE _commit <= {{s:UInt64}}) "
        f"WHERE _rank = 1 AND NOT _deleted ORDER BY {columns}"
    )
    return list(client.query(sql, parameters={"s": snapshot}).result_rows)


def listed(client: Client, names: Databases, table: str) -> list[Any]:
    _, columns = _version_sql(table)
    target = names.ident(names.meta, list_name(table))
    return list(client.query(f"SELECT {columns} FROM {target} ORDER BY {columns}").result_rows)


def lists(client: Client, names: Databases) -> dict[str, list[Any]]:
    return {table: listed(client, names, table) for table in TABLES}


def views_at(house: Warehouse, snapshot: int) -> dict[str, pa.Table]:
    return {name: house.query_arrow(sql, snapshot_id=snapshot) for name, sql in VIEWS.items()}


def fill(house: ClickHouseWarehouse) -> list[int]:
    """Apply :func:`history`; returns every snapshot from the first batch on."""
    episodes = [str(uuid.uuid4()) for _ in range(3)]
    first = house.current_snapshot() + 1
    for events in history(episodes):
        house.apply(batch(*events))
    return list(range(first, house.current_snapshot() + 1))


def _check_every_snapshot(client: Client, names: Databases, snapshots: list[int]) -> None:
    for snapshot in snapshots:
        for table in TABLES:
            assert live_versions(client, names, table, snapshot) == newest_versions(
                client, names, table, snapshot
            ), (table, snapshot)


# -- tests ---------------------------------------------------------------------------------


def test_the_anti_join_is_the_newest_version_at_every_snapshot(
    house: ClickHouseWarehouse, chdb: ChdbEngine
) -> None:
    names = house.databases
    snapshots = fill(house)
    assert len(snapshots) == 4
    _check_every_snapshot(chdb.client, names, snapshots)
    every = lists(chdb.client, names)
    assert all(every[t] for t in TABLES), every
    # One entry per superseded version: the episodes' five (a's first two, b's first, c's
    # first and the tombstone its re-insert replaced), none for the replay the guard dropped.
    assert len(every["episodes"]) == 5
    # A snapshot load over rows already there (the guard, and tombstones for rows it lacks).
    stamp = "2024-01-01 00:00:00+00"
    rows = pa.table({"id": ["t1", "t9"], "description": ["pick", "new"], "created_at": [stamp] * 2})
    position = Position(lsn=1000, snapshot_lsn=1000, slot="s")
    loaded = house.apply_snapshot(["tasks"], [SnapshotChunk("tasks", rows)], position)
    _check_every_snapshot(chdb.client, names, [*snapshots, loaded])
    assert house.query_arrow("SELECT id, description FROM tasks ORDER BY id").to_pylist() == [
        {"id": "t1", "description": "pick"},
        {"id": "t9", "description": "new"},
    ]


def test_a_truncate_lists_every_version_it_ends(
    house: ClickHouseWarehouse, chdb: ChdbEngine
) -> None:
    snapshots = fill(house)
    truncated = house.apply(
        batch(
            event(Op.TRUNCATE, "episode_labels", 500),
            _upsert("episode_labels", 500, 2, _label(9, str(uuid.uuid4()), "after")),
        )
    )
    _check_every_snapshot(chdb.client, house.databases, [*snapshots, truncated])
    live = live_versions(chdb.client, house.databases, "episode_labels", truncated)
    assert [row[0] for row in live] == [9]


def test_a_pinned_read_is_unchanged_by_later_changes(house: ClickHouseWarehouse) -> None:
    episodes = [str(uuid.uuid4()) for _ in range(3)]
    batches = list(history(episodes))
    for events in batches[:2]:
        house.apply(batch(*events))
    pinned = house.current_snapshot()
    before = views_at(house, pinned)
    assert before["episodes"].num_rows == 3
    for events in batches[2:]:
        house.apply(batch(*events))
    assert views_at(house, pinned) == before
    assert views_at(house, house.current_snapshot()) != before


def test_the_migration_backfills_the_same_lists_and_reruns_to_no_change(
    house: ClickHouseWarehouse, chdb: ChdbEngine
) -> None:
    client, names = chdb.client, house.databases
    snapshots = fill(house)
    written = lists(client, names)
    # An upgrade: the mirror holds versions, the lists do not exist yet and the ledger lacks
    # the migration; the next bootstrap runs it.
    for table in TABLES:
        client.command(f"DROP TABLE {names.ident(names.meta, list_name(table))}")
    client.command(
        f"DELETE FROM {names.ident(names.meta, 'applied_sql')} WHERE name = {{n:String}}",
        {"n": MIGRATION},
    )
    house.close()  # a new process: the lists it knows are read again
    upgraded = open_warehouse(house.config)
    try:
        upgraded.bootstrap()
        assert lists(client, names) == written
        _check_every_snapshot(client, names, snapshots)
        (migration,) = [f for f in sql_files(SQL_DIR) if f.name == MIGRATION]
        for statement in render_file(migration, names):  # a crash after it all ran
            client.command(statement)
        assert lists(client, names) == written
    finally:
        upgraded.close()


def test_repair_drops_the_entries_of_a_failed_write(
    house: ClickHouseWarehouse, chdb: ChdbEngine
) -> None:
    client, names = chdb.client, house.databases
    fill(house)
    written = lists(client, names)
    ghost = house.current_snapshot() + 1  # what a write that died before its commit row left
    target = names.ident(names.meta, list_name("robots"))
    client.command(
        f"INSERT INTO {target} (id, _lsn, _seq, _commit) VALUES ('r1', 200, 1, {{c:UInt64}})",
        {"c": ghost},
    )
    house.close()
    again = open_warehouse(house.config)
    try:
        again.apply(batch(lsn=900))  # the next write repairs first
        assert lists(client, names) == written
        assert again.query_arrow("SELECT id FROM robots ORDER BY id").to_pylist() == [
            {"id": "r1"},
            {"id": "r2"},
        ]
    finally:
        again.close()


def test_maintenance_purges_the_entries_of_the_versions_it_purges(
    house: ClickHouseWarehouse, chdb: ChdbEngine
) -> None:
    client, names = chdb.client, house.databases
    fill(house)
    latest = house.current_snapshot()
    before = views_at(house, latest)
    assert sum(len(rows) for rows in lists(client, names).values()) > 0
    house.maintain()
    assert views_at(house, latest) == before
    _check_every_snapshot(client, names, [latest])
    for table in TABLES:  # every superseded version went, and so did its entry
        assert listed(client, names, table) == [], table
