"""DuckLake-specific behaviour of applying change batches (commit info, mirror columns, file
order, maintenance); what every backend does alike is in test_backends.py."""

from __future__ import annotations

import json
import pickle
import time
import uuid

import duckdb
import pyarrow as pa
import pytest

from tests.warehouse.conftest import batch, episode_row, event, robot
from warehouse.base import in_episode_order
from warehouse.changes import ColumnSpec, Op, TableSpec
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.ducklake.connection import (
    DISCARDED,
    attach_lake,
    discard_connection,
    new_database,
)
from warehouse.errors import QueryError, SchemaError, WarehouseError, WarehouseUnavailableError


def ids(lake: DuckLakeWarehouse, sql: str = "SELECT id FROM episodes ORDER BY id") -> list[str]:
    return [str(v) for v in lake.query_arrow(sql).column(0).to_pylist()]


def test_episodes_view_exposes_manifest_columns_first(warehouse: DuckLakeWarehouse) -> None:
    names = warehouse.query_arrow("SELECT * FROM episodes").schema.names
    assert names[:6] == ["id", "uri", "start_ns", "end_ns", "size_bytes", "sha256"]
    assert {
        "robot_id",
        "task_id",
        "site",
        "success",
        "schema_version",
        "pipeline_version",
        "robot_sw_version",
        "quality_flags",
    } <= set(names)


def test_insert_update_delete_and_position(warehouse: DuckLakeWarehouse) -> None:
    a, b = episode_row(), episode_row()
    s1 = warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            event(Op.CREATE, "episodes", 100, 2, after=a),
            event(Op.CREATE, "episodes", 100, 3, after=b),
        )
    )
    assert ids(warehouse) == sorted([a["id"], b["id"]])
    s2 = warehouse.apply(
        batch(
            event(Op.UPDATE, "episodes", 200, after={**a, "steps": 7}),
            event(Op.DELETE, "episodes", 200, 2, before={"id": b["id"]}),
        )
    )
    assert s2 > s1
    assert ids(warehouse, "SELECT id, steps FROM episodes") == [a["id"]]
    assert warehouse.query_arrow("SELECT steps FROM episodes").column(0).to_pylist() == [7]
    position = warehouse.position()
    assert position is not None and position.commit_lsn == 200
    info = (
        warehouse.query_arrow(
            f"SELECT commit_extra_info FROM wh.snapshots() WHERE snapshot_id = {s2}"
        )
        .column(0)
        .to_pylist()[0]
    )
    assert json.loads(info)["commit_lsn"] == 200


def test_replayed_and_older_changes_change_nothing(warehouse: DuckLakeWarehouse) -> None:
    a = episode_row()
    first = batch(event(Op.CREATE, "episodes", 100, after=a))
    warehouse.apply(first)
    warehouse.apply(batch(event(Op.UPDATE, "episodes", 300, after={**a, "steps": 3})))
    warehouse.apply(batch(event(Op.UPDATE, "episodes", 200, after={**a, "steps": 2})))
    warehouse.apply(first)
    rows = warehouse.query_arrow("SELECT id, _lsn, steps FROM mirror.episodes").to_pylist()
    assert [(r["_lsn"], r["steps"]) for r in rows] == [(300, 3)]


def test_episodes_view_has_one_row_per_live_episode(warehouse: DuckLakeWarehouse) -> None:
    a, b = episode_row(), episode_row(status="retracted")
    flags = [
        event(
            Op.CREATE,
            "episode_quality_flags",
            100,
            3 + i,
            after={"episode_id": a["id"], "flag": flag, "detail": "{}"},
        )
        for i, flag in enumerate(["choppy_joints", "camera_blackout"])
    ]
    warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            event(Op.CREATE, "episodes", 100, 2, after=a),
            event(Op.CREATE, "episodes", 100, 9, after=b),
            *flags,
        )
    )
    rows = warehouse.query_arrow("SELECT id, robot_model, quality_flags FROM episodes")
    assert rows.to_pylist() == [
        {"id": a["id"], "robot_model": "arm", "quality_flags": ["camera_blackout", "choppy_joints"]}
    ]
    count = warehouse.query_arrow("SELECT count(*) AS n FROM episode_quality_flags")
    assert count.to_pylist() == [{"n": 2}]


def test_schema_change_adds_columns_and_tables(warehouse: DuckLakeWarehouse) -> None:
    columns = (
        ColumnSpec("id", "text"),
        ColumnSpec("model", "text"),
        ColumnSpec("site", "text"),
        ColumnSpec("created_at", "timestamp with time zone"),
        ColumnSpec("serial", "character varying(20)"),
    )
    assert warehouse.ensure_table(TableSpec("robots", columns, ("id",)))
    assert not warehouse.ensure_table(TableSpec("robots", columns, ("id",)))
    warehouse.apply(batch(event(Op.CREATE, "robots", 100, after={**robot(), "serial": "X1"})))
    rows = warehouse.query_arrow("SELECT serial FROM mirror.robots").column(0).to_pylist()
    assert rows == ["X1"]
    spec = TableSpec("sites", (ColumnSpec("name", "text"), ColumnSpec("tags", "text[]")), ("name",))
    assert warehouse.ensure_table(spec)
    warehouse.apply(batch(event(Op.CREATE, "sites", 200, after={"name": "a", "tags": ["x"]})))
    assert warehouse.query_arrow("SELECT tags FROM mirror.sites").column(0).to_pylist() == [["x"]]


def test_unknown_table_is_refused(warehouse: DuckLakeWarehouse) -> None:
    with pytest.raises(SchemaError, match="does not mirror"):
        warehouse.apply(batch(event(Op.CREATE, "nope", 1, after={"id": 1})))


def test_errors_pickle_with_their_attributes() -> None:
    error = WarehouseUnavailableError("down", table="episodes")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.message, copy.retryable, copy.context) == (
        WarehouseUnavailableError,
        "down",
        True,
        {"table": "episodes"},
    )
    assert not pickle.loads(pickle.dumps(WarehouseError("x"))).retryable


def test_maintenance_keeps_snapshots_that_manifests_reference(
    warehouse_config: WarehouseConfig,
) -> None:
    config = warehouse_config.model_copy(
        update={"snapshot_retain_s": 0.0, "data_inlining_row_limit": 5}
    )
    with DuckLakeWarehouse(config) as lake:
        lake.bootstrap()
        rows = [episode_row() for _ in range(20)]
        pinned = lake.apply(
            batch(
                *[event(Op.CREATE, "episodes", 100, i + 1, after=row) for i, row in enumerate(rows)]
            )
        )
        loose = lake.apply(batch(event(Op.UPDATE, "episodes", 200, after={**rows[0], "steps": 1})))
        manifest = {
            "id": "m1",
            "reuse_key": "k",
            "sql": "SELECT * FROM episodes",
            "sample_spec": "{}",
            "snapshot_id": pinned,
            "cdc_position": "0/0",
            "rows": 20,
            "samples": 20,
            "size_bytes": 1,
            "uri": "u",
            "author": "a",
            "created_at": None,
        }
        lake.apply(
            batch(
                event(Op.CREATE, "manifests", 300, after=manifest),
                event(Op.DELETE, "episodes", 300, 2, before={"id": rows[1]["id"]}),
            )
        )
        sql = "SELECT id, steps FROM episodes ORDER BY id"
        before = lake.query_arrow(sql, snapshot_id=pinned)
        report = lake.maintain()
        assert pinned in report.protected and loose in report.expired
        assert lake.query_arrow(sql, snapshot_id=pinned) == before
        with pytest.raises(QueryError):
            lake.query_arrow(sql, snapshot_id=loose)
        assert lake.query_arrow("SELECT count(*) AS n FROM episodes").to_pylist() == [{"n": 19}]


def test_maintenance_purges_only_tombstones_older_than_pins_and_retention(
    warehouse_config: WarehouseConfig,
) -> None:
    config = warehouse_config.model_copy(update={"snapshot_retain_s": 0.0})
    with DuckLakeWarehouse(config) as lake:
        lake.bootstrap()
        a, b = episode_row(), episode_row()
        pinned = lake.apply(
            batch(
                event(Op.CREATE, "episodes", 100, after=a),
                event(Op.CREATE, "episodes", 100, 2, after=b),
            )
        )
        manifest = {"id": "m1", "reuse_key": "k", "sql": "SELECT 1", "sample_spec": "{}"}
        manifest |= {"snapshot_id": pinned, "cdc_position": "", "rows": 1, "samples": 1}
        manifest |= {"size_bytes": 1, "uri": "u", "author": "a", "created_at": None}
        lake.apply(batch(event(Op.CREATE, "manifests", 150, after=manifest)))
        lake.apply(batch(event(Op.DELETE, "episodes", 200, before={"id": a["id"]})))
        lake.apply(batch(lsn=300))  # a heartbeat: the position moves on
        tombstones = "SELECT count(*) AS n FROM mirror.episodes WHERE _deleted"
        assert lake.maintain().purged == 0  # the manifest pins a snapshot from before it
        assert lake.query_arrow(tombstones).to_pylist() == [{"n": 1}]
        lake.apply(batch(event(Op.DELETE, "manifests", 400, before={"id": "m1"}), lsn=400))
        time.sleep(0.05)
        assert lake.maintain().purged == 1
        assert lake.query_arrow(tombstones).to_pylist() == [{"n": 0}]
        assert ids(lake) == [b["id"]]


def _robots_per_file(config: WarehouseConfig) -> list[list[str]]:
    """The ``robot_id`` of each live row of ``mirror.episodes``, per data file, in file order."""
    con = new_database(threads=1)
    try:
        attach_lake(con, config, read_only=True)
        files = con.execute(
            "SELECT data_file FROM ducklake_list_files($1, 'episodes', schema => 'mirror')",
            [config.alias],
        ).fetchall()
        return [
            [r[0] for r in con.execute("SELECT robot_id FROM read_parquet($1)", [f]).fetchall()]
            for (f,) in files
        ]
    finally:
        con.close()


def test_episode_files_are_sorted_by_robot_and_task(warehouse_config: WarehouseConfig) -> None:
    """Every file the mirror writes for ``episodes`` (a CDC batch, then the compaction that
    merges batches) is in (robot, task, start) order, so a curation on robot and task skips
    the row groups of other robots by their statistics."""
    config = warehouse_config.model_copy(
        update={"snapshot_retain_s": 0.0, "data_inlining_row_limit": 0}
    )
    with DuckLakeWarehouse(config) as lake:
        lake.bootstrap()
        for lsn, robots in ((100, ["r3", "r1", "r2", "r1"]), (200, ["r2", "r0", "r3"])):
            rows = [episode_row(robot_id=r, start_ns=-i) for i, r in enumerate(robots)]
            lake.apply(
                batch(
                    *[event(Op.CREATE, "episodes", lsn, i + 1, after=r) for i, r in enumerate(rows)]
                )
            )
        written = _robots_per_file(config)
        assert [sorted(f) for f in written] == written and len(written) == 2
        lake.maintain()
        merged = _robots_per_file(config)
    assert merged == [["r0", "r1", "r1", "r2", "r2", "r3", "r3"]]


def test_lineage_is_stored_in_episode_order(warehouse: DuckLakeWarehouse) -> None:
    episodes = [str(uuid.UUID(int=n * 7919 % 1000 + 1)) for n in range(200)]
    for manifest_id, ids in (("m-shuffled", episodes), ("m-sorted", sorted(episodes))):
        rows = pa.table({"episode_id": ids, "sha256": [f"{n:064x}" for n in range(len(ids))]})
        warehouse.append_lineage(manifest_id, rows)
        stored = warehouse.query_arrow(
            f"SELECT episode_id, sha256 FROM manifest_lineage WHERE manifest_id = '{manifest_id}'"
        )
        assert stored.column("episode_id").to_pylist() == sorted(episodes), manifest_id
        sent = dict(zip(ids, rows.column("sha256").to_pylist(), strict=True))
        kept = zip(*(stored.column(c).to_pylist() for c in ("episode_id", "sha256")), strict=True)
        assert dict(kept) == sent, manifest_id
    assert not in_episode_order(pa.chunked_array([["b", "a"]]))
    assert not in_episode_order(pa.chunked_array([["a", None, "b"]]))
    assert in_episode_order(pa.chunked_array([["a"], ["a", "c"]]))
    assert in_episode_order(pa.chunked_array([["a"]])) and not in_episode_order(
        pa.chunked_array([[None]])
    )


def test_a_writer_dropped_for_a_lost_catalog_is_kept_open() -> None:
    """Closing a connection whose catalog server vanished mid-commit can abort the process
    inside DuckDB; such a connection is kept, any other closed (discard_connection)."""
    gone = duckdb.TransactionException(
        "Failed to commit: Failed to execute query: server closed the connection unexpectedly"
    )
    cases = [
        (gone, True),
        (duckdb.TransactionException("TransactionContext Error: Transaction conflict"), False),
        (duckdb.BinderException("Binder Error: no such column"), False),
        (None, False),
    ]
    for error, kept in cases:
        con = new_database(threads=1)
        con.execute("BEGIN TRANSACTION")
        before = len(DISCARDED)
        discard_connection(con, error)
        assert DISCARDED[-1] is con if kept else len(DISCARDED) == before, error
        if kept:  # still open, rolled back
            assert con.execute("SELECT 1").fetchone() == (1,)
        else:
            with pytest.raises(duckdb.ConnectionException):
                con.execute("SELECT 1")
