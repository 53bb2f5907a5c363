"""One suite for every warehouse backend (ibis-style): DuckLake and ClickHouse (chDB, the
real engine in-process) must behave the same through :class:`warehouse.base.Warehouse`.

Queries are written once, in DuckDB's dialect (what users write), and rendered for each
backend with sqlglot, as the service renders a checked curation.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlglot

from cdc.batch import PendingBatch
from cdc.config import CdcConfig
from cdc.debezium import apply_debezium
from cdc.pgoutput import (
    Begin,
    Commit,
    Insert,
    Message,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    Update,
)
from cdc.slot import drop_slot
from cdc.source import connect as cdc_connect
from cdc.source import table_spec
from cdc.transactions import TransactionAssembler
from cdc.values import SESSION_OPTIONS
from tests.cdc.conftest import (
    MIRRORED,
    caught_up,
    insert_episodes,
    normalize,
    running,
    seed,
    source_rows,
    table_columns,
    wait_until,
)
from tests.fixtures.clickhouse import ChdbEngine
from tests.fixtures.warehouse import new_warehouse_config
from tests.warehouse.conftest import batch, episode_row, event, robot
from tests.warehouse.fleet import fleet, lineage
from warehouse.backends import dialect_of, open_warehouse
from warehouse.base import CURATION_VIEWS, Warehouse
from warehouse.changes import ChangeBatch, ColumnSpec, Op, Position, SnapshotChunk, TableSpec
from warehouse.clickhouse.backend import ClickHouseWarehouse
from warehouse.clickhouse.schema import Databases
from warehouse.config import ClickHouseConfig, WarehouseConfig
from warehouse.errors import QueryError, QueryTimeoutError, RowLimitError, WarehouseError
from warehouse.rows import Layout, TextRows

BACKENDS = ("ducklake", "clickhouse")


@dataclass
class Case:
    """One backend's warehouse in a test, and its SQL dialect."""

    backend: str
    config: WarehouseConfig
    warehouse: Warehouse

    @property
    def dialect(self) -> str:
        return dialect_of(self.config)

    def render(self, sql: str) -> str:
        return sqlglot.transpile(sql, read="duckdb", write=self.dialect)[0]

    def query(self, sql: str, **limits: Any) -> pa.Table:
        return self.warehouse.query_arrow(self.render(sql), **limits)

    def rows(self, sql: str, **limits: Any) -> list[dict[str, Any]]:
        return list(self.query(sql, **limits).to_pylist())

    def column(self, sql: str, **limits: Any) -> list[Any]:
        return list(self.query(sql, **limits).column(0).to_pylist())


Opener = Callable[..., Case]


def _open(request: pytest.FixtureRequest, backend: str, folder: Path, **updates: Any) -> Case:
    if backend == "clickhouse":
        config = request.getfixturevalue("chdb").new_config(**updates)
    else:
        config = new_warehouse_config(request.getfixturevalue("postgres"), folder)
        config = config.model_copy(update=updates)
    case = Case(backend, config, open_warehouse(config))
    case.warehouse.bootstrap()
    return case


def _close(request: pytest.FixtureRequest, case: Case) -> None:
    case.warehouse.close()
    if case.backend == "clickhouse":
        request.getfixturevalue("chdb").drop(case.config)


@pytest.fixture
def open_case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens a bootstrapped warehouse of a backend (config fields overridable)."""
    opened: list[Case] = []

    def open_one(backend: str, **updates: Any) -> Case:
        opened.append(_open(request, backend, tmp_path / f"lake{len(opened)}", **updates))
        return opened[-1]

    yield open_one
    for case in opened:
        _close(request, case)


@pytest.fixture(params=BACKENDS)
def case(request: pytest.FixtureRequest, open_case: Opener) -> Case:
    return open_case(request.param)


def ids(case: Case) -> list[str]:
    return [str(v) for v in case.column("SELECT id FROM episodes ORDER BY id")]


# -- the interface, on each backend ------------------------------------------------------


def test_bootstrap_is_idempotent(case: Case) -> None:
    before = case.warehouse.current_snapshot()
    case.warehouse.bootstrap()
    assert case.warehouse.current_snapshot() == before
    assert case.warehouse.position() is None
    assert case.warehouse.mirrored_tables()["episode_stats"] == ("episode_id", "field", "dim")
    # Every curation view but episode_instructions (episodes.instruction) and
    # manifest_episodes (the warehouse's own lineage) is named after the table behind it.
    assert case.warehouse.unloaded_tables() == sorted(
        set(CURATION_VIEWS) - {"episode_instructions", "manifest_episodes"}
    )
    described = case.warehouse.describe_tables()["episodes"]
    assert dict(described.columns)["topics"] == "JSON"
    assert dict(described.columns)["id"] == "UUID"


VIEW_TYPES = {
    "episodes": "id:string uri:string start_ns:int64 end_ns:int64 size_bytes:int64 "
    "sha256:string robot_id:string robot_model:string task_id:string site:string "
    "operator:string success:bool started_at:timestamp[us,tz=Etc/UTC] "
    "ended_at:timestamp[us,tz=Etc/UTC] duration_s:double steps:int32 control_hz:double "
    "topics:string quality_flags:list<l:string> qc_report:string schema_version:int32 "
    "pipeline_version:int32 robot_sw_version:string created_at:timestamp[us,tz=Etc/UTC] "
    "updated_at:timestamp[us,tz=Etc/UTC]",
    "episode_quality_flags": "episode_id:string flag:string detail:string",
    "episode_labels": "id:int64 episode_id:string key:string value:string start_ns:int64 "
    "end_ns:int64 author:string created_at:timestamp[us,tz=Etc/UTC]",
    "episode_stats": "episode_id:string field:string dim:int32 count:int64 sum:double "
    "sum_sq:double min:double max:double",
    "episode_instructions": "episode_id:string instruction:string",
    "episode_evaluations": "checkpoint_id:string episode_id:string manifest_id:string "
    "success:bool scores:string evaluation_id:string run_id:string "
    "created_at:timestamp[us,tz=Etc/UTC]",
    "robots": "id:string model:string site:string created_at:timestamp[us,tz=Etc/UTC]",
    "tasks": "id:string description:string created_at:timestamp[us,tz=Etc/UTC]",
    "manifests": "id:string reuse_key:string sql:string sample_spec:string snapshot_id:int64 "
    "cdc_position:string rows:int64 samples:int64 size_bytes:int64 uri:string author:string "
    "created_at:timestamp[us,tz=Etc/UTC]",
    "manifest_episodes": "manifest_id:string episode_id:string sha256:string",
}


def test_views_have_the_same_columns_and_types(case: Case) -> None:
    for view in CURATION_VIEWS:
        schema = case.query(f"SELECT * FROM {view}").schema
        described = " ".join(f"{f.name}:{str(f.type).replace(' ', '')}" for f in schema)
        assert described == VIEW_TYPES[view], view
        assert all(f.nullable for f in schema), view


def test_insert_update_delete_and_position(case: Case) -> None:
    a, b = episode_row(), episode_row()
    s1 = case.warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            event(Op.CREATE, "episodes", 100, 2, after=a),
            event(Op.CREATE, "episodes", 100, 3, after=b),
        )
    )
    assert ids(case) == sorted([a["id"], b["id"]])
    s2 = case.warehouse.apply(
        batch(
            event(Op.UPDATE, "episodes", 200, after={**a, "steps": 7}),
            event(Op.DELETE, "episodes", 200, 2, before={"id": b["id"]}),
        )
    )
    assert s2 > s1 == case.warehouse.current_snapshot() - 1
    assert case.rows("SELECT id, steps FROM episodes") == [{"id": a["id"], "steps": 7}]
    position = case.warehouse.position()
    assert position is not None and position.commit_lsn == 200
    assert case.warehouse.position(at=s1) == batch(lsn=100).position


def test_replays_and_older_changes_converge(case: Case) -> None:
    a = episode_row()
    first = batch(event(Op.CREATE, "episodes", 100, after=a))
    case.warehouse.apply(first)
    case.warehouse.apply(batch(event(Op.UPDATE, "episodes", 300, after={**a, "steps": 3})))
    case.warehouse.apply(batch(event(Op.UPDATE, "episodes", 200, after={**a, "steps": 2})))
    case.warehouse.apply(first)
    assert case.column("SELECT steps FROM episodes") == [3]
    case.warehouse.apply(batch(event(Op.DELETE, "episodes", 500, before={"id": a["id"]})))
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 400, after=a)))
    assert ids(case) == []


def test_truncate_drops_older_rows_and_later_older_changes(case: Case) -> None:
    a, b, c = episode_row(), episode_row(), episode_row()
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    case.warehouse.apply(
        batch(
            event(Op.CREATE, "episodes", 200, after={**a, "steps": 1}),
            event(Op.TRUNCATE, "episodes", 300, 1),
            event(Op.CREATE, "episodes", 300, 2, after=b),
        )
    )
    assert ids(case) == [b["id"]]
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 250, after=c)))  # a re-delivery
    assert ids(case) == [b["id"]]


def test_unchanged_toast_keeps_the_stored_value(case: Case) -> None:
    a = episode_row(qc_report='{"big": "value"}')
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    partial = {**a, "qc_report": None, "steps": 9}
    case.warehouse.apply(
        batch(event(Op.UPDATE, "episodes", 200, after=partial, unchanged=frozenset({"qc_report"})))
    )
    assert case.rows("SELECT qc_report, steps FROM episodes") == [
        {"qc_report": '{"big": "value"}', "steps": 9}
    ]


def test_key_change_moves_the_row(case: Case) -> None:
    case.warehouse.apply(batch(event(Op.CREATE, "robots", 100, after=robot("r1"))))
    case.warehouse.apply(
        batch(event(Op.UPDATE, "robots", 200, before={"id": "r1"}, after=robot("r2")))
    )
    assert case.column("SELECT id FROM robots") == ["r2"]


def test_retraction_hides_the_episode_and_its_children(case: Case) -> None:
    a, b = episode_row(), episode_row()
    flags = [
        event(
            Op.CREATE, "episode_quality_flags", 100, 3 + i, after={"episode_id": e["id"], "flag": f}
        )
        for i, (e, f) in enumerate([(a, "choppy_joints"), (a, "camera_blackout"), (b, "x")])
    ]
    case.warehouse.apply(
        batch(
            event(Op.CREATE, "robots", 100, after=robot()),
            event(Op.CREATE, "episodes", 100, 1, after=a),
            event(Op.CREATE, "episodes", 100, 2, after=b),
            *flags,
        )
    )
    case.warehouse.apply(
        batch(event(Op.UPDATE, "episodes", 200, after={**b, "status": "retracted"}))
    )
    assert case.rows("SELECT id, robot_model, quality_flags FROM episodes") == [
        {"id": a["id"], "robot_model": "arm", "quality_flags": ["camera_blackout", "choppy_joints"]}
    ]
    assert case.column("SELECT count(*) AS n FROM episode_quality_flags") == [2]


def test_snapshot_load_tombstones_rows_it_lacks(case: Case) -> None:
    stale = episode_row()
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=stale)))
    rows = pa.table(
        {
            "id": ["r9"],
            "model": ["arm"],
            "site": ["lab"],
            "created_at": ["2024-01-02 03:04:05.5+00"],
        }
    )
    position = Position(lsn=1000, snapshot_lsn=1000, slot="s")
    before = case.warehouse.current_snapshot()
    loaded = case.warehouse.apply_snapshot(
        ["robots", "episodes"], [SnapshotChunk("robots", rows)], position
    )
    assert loaded > before and ids(case) == []
    robots = case.rows("SELECT id, created_at FROM robots")
    assert robots[0]["id"] == "r9" and robots[0]["created_at"].microsecond == 500_000
    assert case.warehouse.position() == position
    assert "robots" not in case.warehouse.unloaded_tables()


def test_schema_change_adds_columns_and_tables(case: Case) -> None:
    columns = (
        ColumnSpec("id", "text"),
        ColumnSpec("model", "text"),
        ColumnSpec("site", "text"),
        ColumnSpec("created_at", "timestamp with time zone"),
        ColumnSpec("serial", "character varying(20)"),
    )
    assert case.warehouse.ensure_table(TableSpec("robots", columns, ("id",)))
    assert not case.warehouse.ensure_table(TableSpec("robots", columns, ("id",)))
    case.warehouse.apply(batch(event(Op.CREATE, "robots", 100, after={**robot(), "serial": "X1"})))
    assert case.column("SELECT id FROM robots") == ["r1"]
    spec = TableSpec("sites", (ColumnSpec("name", "text"), ColumnSpec("tags", "text[]")), ("name",))
    assert case.warehouse.ensure_table(spec)
    case.warehouse.apply(batch(event(Op.CREATE, "sites", 200, after={"name": "a", "tags": ["x"]})))
    described = case.warehouse.describe_tables()
    assert dict(described["robots"].columns)["serial"] == "VARCHAR"
    assert described["sites"].columns == (("name", "VARCHAR"), ("tags", "VARCHAR[]"))
    assert case.warehouse.mirrored_tables()["sites"] == ("name",)


def test_pinned_reads_and_data_versions(case: Case) -> None:
    a = episode_row()
    first = case.warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    second = case.warehouse.apply(
        batch(
            event(Op.UPDATE, "episodes", 200, after={**a, "steps": 1}),
            event(Op.CREATE, "episodes", 200, 2, after=episode_row()),
        )
    )
    task = {"id": "t1", "description": "pick"}
    other = case.warehouse.apply(batch(event(Op.CREATE, "tasks", 300, after=task)))
    sql = "WITH e AS (SELECT * FROM episodes) SELECT steps FROM e ORDER BY steps"
    assert case.column(sql, snapshot_id=first) == [600]
    assert case.column(sql) == [1, 600]
    assert case.warehouse.data_version(["episodes"], at=other) == second
    assert case.warehouse.data_version(["episode_stats"], at=other) == second
    assert case.warehouse.data_version(["tasks"]) == other
    assert case.warehouse.data_version(["tasks"], at=second) < first
    with pytest.raises(QueryError, match="snapshot"):
        case.query("SELECT * FROM episodes", snapshot_id=other + 1000)


def test_runaway_query_is_stopped(case: Case) -> None:
    rows = [event(Op.CREATE, "episodes", 100, i + 1, after=episode_row()) for i in range(40)]
    case.warehouse.apply(batch(*rows))
    joined = ", ".join(f"episodes AS e{n}" for n in range(7))  # 40^7 rows
    total = " + ".join(f"e{n}.steps" for n in range(7))
    runaway = f"SELECT count(*) AS n FROM {joined} WHERE {total} > 0"
    with pytest.raises(QueryTimeoutError):
        case.query(runaway, timeout_s=0.3)
    assert case.column("SELECT count(*) AS n FROM episodes") == [40]


def test_row_cap(case: Case) -> None:
    rows = [event(Op.CREATE, "episodes", 100, i + 1, after=episode_row()) for i in range(12)]
    case.warehouse.apply(batch(*rows))
    with pytest.raises(RowLimitError):
        case.query("SELECT id FROM episodes", max_rows=11)
    assert case.query("SELECT id FROM episodes", max_rows=12).num_rows == 12
    inner = "SELECT count(*) AS n FROM episodes WHERE id IN (SELECT id FROM episodes)"
    assert case.column(inner, max_rows=1) == [12]


def test_a_failed_batch_leaves_nothing_behind(case: Case) -> None:
    columns = ["id", "robot_id", "steps"]
    rows = TextRows("episodes")
    good, bad = episode_row(), episode_row()
    layout = Layout.of("episodes", columns, ["id"])
    rows.upsert(layout, (bad["id"].encode(), b"r1", b"not a number"), (200, 2))
    robots = batch(event(Op.CREATE, "robots", 200, after=robot("r7")))
    broken = ChangeBatch([*robots.tables, rows], batch(lsn=200).position)
    before = case.warehouse.current_snapshot()
    with pytest.raises(WarehouseError):
        case.warehouse.apply(broken)
    assert case.warehouse.current_snapshot() == before and case.warehouse.position() is None
    case.warehouse.apply(batch(event(Op.CREATE, "episodes", 300, after=good)))
    assert case.column("SELECT id FROM robots") == []
    assert ids(case) == [good["id"]]
    case.warehouse.apply(batch(event(Op.CREATE, "robots", 200, after=robot("r7")), lsn=400))
    assert case.column("SELECT id FROM robots") == ["r7"]


def test_a_query_reads_arrow_tables_passed_with_it(case: Case) -> None:
    a, b = episode_row(), episode_row()
    case.warehouse.apply(
        batch(
            event(Op.CREATE, "episodes", 100, after=a),
            event(Op.CREATE, "episodes", 100, 2, after=b),
        )
    )
    wanted = pa.table({"episode_id": [b["id"], "not-an-id"]})
    sql = "SELECT id FROM episodes WHERE id IN (SELECT episode_id FROM wanted_ids) ORDER BY id"
    assert case.column(sql, tables={"wanted_ids": wanted}) == [b["id"]]
    for bad in ({"episodes": wanted}, {"Wanted-Ids": wanted}, {"wanted_ids": [b["id"]]}):
        with pytest.raises(QueryError):
            case.query(sql, tables=bad)


HOSTILE = {
    "ducklake": [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM postgres_query('wh', 'SELECT 1')",
        "COPY (SELECT 1) TO '/tmp/quarry-escape.csv'",
    ],
    "clickhouse": [
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV', 'a String')",
        "SELECT * FROM system.tables",
        "SELECT 1 SETTINGS readonly = 0",
        "SELECT * FROM episodes SETTINGS max_execution_time = 0",
    ],
}


def test_reader_refuses_writes_and_escapes(case: Case) -> None:
    for sql in ["SELECT 1; SELECT 2", "DELETE FROM episodes", "DROP TABLE episodes"]:
        with pytest.raises(QueryError):
            case.warehouse.query_arrow(sql)
    for sql in HOSTILE[case.backend]:
        with pytest.raises(QueryError):
            case.warehouse.query_arrow(sql)
    assert case.column("SELECT count(*) AS n FROM episodes") == [0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_stops_the_running_query_of_a_tag(open_case: Opener, backend: str) -> None:
    """``Warehouse.cancel(tag)`` stops the running query of that tag inside the engine (the
    curation engine's cancel, on either backend); a query of another tag runs on."""
    case = open_case(backend)
    house = case.warehouse
    rows = [event(Op.CREATE, "episodes", 100, i + 1, after=episode_row()) for i in range(40)]
    house.apply(batch(*rows))
    joined = ", ".join(f"episodes AS e{n}" for n in range(7))  # 40^7 rows
    runaway = case.render(f"SELECT count(*) AS n FROM {joined} WHERE e0.steps + e6.steps > 0")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            house.query_arrow(runaway, timeout_s=60, tag="runaway")
        except QueryError as error:
            failures.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    started = time.monotonic()
    while thread.is_alive() and time.monotonic() - started < 30:
        house.cancel("runaway")
        house.cancel("another-tag")  # names no running query: nothing happens
        thread.join(0.2)
    assert not thread.is_alive(), "the cancelled query still runs"
    assert len(failures) == 1 and not isinstance(failures[0], QueryTimeoutError)
    assert case.column("SELECT count(*) AS n FROM episodes", tag="runaway") == [40]
    with pytest.raises(WarehouseError, match="not a query tag"):
        house.cancel("x' OR 1 = 1 --")


def test_clickhouse_kills_a_tagged_query(open_case: Opener) -> None:
    """``cancel`` stops the running queries of a tag (the service's cancel); a tag
    must be a short identifier, since it is spliced into SQL."""
    case = open_case("clickhouse")
    house = case.warehouse
    assert isinstance(house, ClickHouseWarehouse)
    rows = [event(Op.CREATE, "episodes", 100, i + 1, after=episode_row()) for i in range(40)]
    house.apply(batch(*rows))
    joined = ", ".join(f"episodes AS e{n}" for n in range(7))  # 40^7 rows
    runaway = case.render(f"SELECT count(*) AS n FROM {joined} WHERE e0.steps + e6.steps > 0")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            house.query_arrow(runaway, timeout_s=30, tag="t-1")
        except QueryError as error:
            failures.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 20
    while thread.is_alive() and time.monotonic() < deadline:
        house.cancel("t-1")
        thread.join(0.2)
    assert not thread.is_alive()
    assert len(failures) == 1 and "QUERY_WAS_CANCELLED" in str(failures[0])
    assert not isinstance(failures[0], QueryTimeoutError)
    for tag in ("x' OR 1 = 1 --", "", "a" * 65):
        with pytest.raises(WarehouseError, match="not a query tag"):
            house.cancel(tag)
        with pytest.raises(WarehouseError, match="not a query tag"):
            house.query_arrow("SELECT 1 AS n", tag=tag)
    assert case.column("SELECT count(*) AS n FROM episodes", tag="t-2") == [40]


def _manifest(snapshot: int, lsn: int) -> Any:
    row: dict[str, Any] = {"id": "m1", "reuse_key": "k", "sql": "SELECT 1", "sample_spec": "{}"}
    row |= {"snapshot_id": snapshot, "cdc_position": "", "rows": 1, "samples": 1}
    return event(Op.CREATE, "manifests", lsn, after=row | {"size_bytes": 1, "uri": "u"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_maintenance_keeps_what_manifests_pin_and_purges_the_rest(
    open_case: Opener, backend: str
) -> None:
    case = open_case(backend, snapshot_retain_s=0.0)
    lake = case.warehouse
    rows = [episode_row() for _ in range(6)]
    pinned = lake.apply(
        batch(*[event(Op.CREATE, "episodes", 100, i + 1, after=r) for i, r in enumerate(rows)])
    )
    loose = lake.apply(batch(event(Op.UPDATE, "episodes", 200, after={**rows[0], "steps": 1})))
    lake.apply(
        batch(
            _manifest(pinned, 300),
            event(Op.DELETE, "episodes", 300, 2, before={"id": rows[1]["id"]}),
        )
    )
    sql = "SELECT id, steps FROM episodes ORDER BY id"
    before = case.query(sql, snapshot_id=pinned)
    report = lake.maintain()
    assert pinned in report.protected and loose in report.expired and report.purged == 0
    assert case.query(sql, snapshot_id=pinned) == before
    with pytest.raises(QueryError):
        case.query(sql, snapshot_id=loose)
    assert case.column("SELECT count(*) AS n FROM episodes") == [5]
    lake.apply(batch(event(Op.DELETE, "manifests", 400, before={"id": "m1"})))
    lake.apply(batch(lsn=500))  # a heartbeat
    assert lake.maintain().purged == 2  # the episode's and the manifest's tombstones
    assert case.column("SELECT count(*) AS n FROM episodes") == [5]
    assert case.column("SELECT count(*) AS n FROM manifests") == [0]


# -- the same curation, the same rows ----------------------------------------------------

CURATIONS = [
    "SELECT * FROM episodes ORDER BY id",
    # qualified columns of a subquery and a CTE are named as DuckDB names them
    "WITH f AS (SELECT q.episode_id, q.flag FROM episode_quality_flags AS q) "
    "SELECT s.id, s.start_ns, f.flag FROM (SELECT e.id, l.start_ns FROM episodes AS e "
    "JOIN episode_labels AS l ON l.episode_id = e.id) AS s JOIN f ON f.episode_id = s.id "
    "ORDER BY s.id, f.flag",
    "SELECT id, start_ns, end_ns FROM episodes WHERE success AND robot_id IN ('r1', 'r2') "
    "ORDER BY id",
    "SELECT id FROM episodes WHERE NOT list_contains(quality_flags, 'camera_blackout') "
    "AND pipeline_version BETWEEN 2 AND 3 ORDER BY id",
    "SELECT robot_id, robot_model, task_id, count(*) AS n, sum(duration_s) / 3600 AS hours, "
    "min(started_at) AS first FROM episodes GROUP BY ALL ORDER BY robot_id, task_id",
    "SELECT e.id AS episode_id, l.start_ns, l.end_ns, l.value FROM episodes AS e "
    "JOIN episode_labels AS l ON l.episode_id = e.id WHERE l.key = 'segment' "
    "ORDER BY e.id, l.start_ns",
    # an integer sum is HUGEINT on DuckDB and Int64 on ClickHouse: cast it for equal types
    "SELECT field, dim, CAST(sum(count) AS BIGINT) AS count, sum(sum) AS sum, min(min) AS min, "
    "max(max) AS max "
    "FROM episode_stats WHERE episode_id IN (SELECT id FROM episodes WHERE success) "
    "GROUP BY field, dim ORDER BY field, dim",
    "WITH f AS (SELECT episode_id, count(*) AS n FROM episode_quality_flags GROUP BY "
    "episode_id) SELECT e.id, coalesce(f.n, 0) AS flags FROM episodes AS e LEFT JOIN f "
    "ON f.episode_id = e.id ORDER BY e.id",
    "SELECT id, greatest(start_ns, 5000000000) AS start_ns, least(end_ns, 60000000000) AS "
    "end_ns, CASE WHEN success THEN 'ok' ELSE 'bad' END AS outcome FROM episodes ORDER BY id",
    "SELECT m.id, count(*) AS episodes FROM manifests AS m JOIN manifest_episodes AS me "
    "ON me.manifest_id = m.id GROUP BY m.id ORDER BY m.id",
    "SELECT manifest_id, episode_id, sha256 FROM manifest_episodes ORDER BY episode_id",
    "SELECT manifest_id, count(*) AS n FROM manifest_lineage GROUP BY manifest_id "
    "ORDER BY manifest_id",
    "SELECT id FROM episodes WHERE started_at >= TIMESTAMPTZ '2024-01-03 00:00:00+00' "
    "AND lower(operator) LIKE 'c%' ORDER BY id",
    "SELECT task_id, count(DISTINCT robot_id) AS robots FROM episodes GROUP BY task_id "
    "HAVING count(*) > 2 ORDER BY task_id",
    "SELECT id, row_number() OVER (PARTITION BY task_id ORDER BY started_at, id) AS rank "
    "FROM episodes QUALIFY rank <= 2 ORDER BY id",
    "SELECT id, json_extract_string(qc_report, '$.score') AS score FROM episodes ORDER BY id",
    "SELECT flag, count(DISTINCT episode_id) AS episodes FROM episode_quality_flags "
    "GROUP BY flag ORDER BY episodes DESC, flag",
    "SELECT episodes.id, robot_id, model FROM episodes LEFT JOIN robots ON robots.id = robot_id "
    "ORDER BY id",
    "SELECT id, description FROM tasks ORDER BY id",
    "SELECT id, control_hz, success, qc_report, started_at, ended_at FROM episodes "
    "WHERE started_at >= TIMESTAMPTZ '2024-03-01 00:00:00+00' OR steps = 5 ORDER BY id",
    "SELECT id FROM episodes WHERE md5(id) < '8' ORDER BY id",
    "SELECT id, array_length(quality_flags) AS flags FROM episodes ORDER BY id",
    # the internal views a manifest build composes in: raw UUID keys come back as text, but
    # the engines order raw UUIDs differently (ClickHouse: the last 8 bytes first)
    "SELECT * FROM episode_objects ORDER BY CAST(id AS VARCHAR)",
    "SELECT s.* FROM episode_stat_rows AS s JOIN episode_objects AS o ON o.id = s.episode_id "
    "WHERE o.robot_id = 'r1' ORDER BY CAST(s.episode_id AS VARCHAR), s.field, s.dim",
    "SELECT c.id, o.uri FROM (SELECT id FROM episodes WHERE success) AS c JOIN episode_objects "
    "AS o ON o.id = CAST(c.id AS UUID) ORDER BY c.id",
]


@pytest.fixture(scope="module")
def fleets(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Case]]:
    """Both backends, holding the same fleet."""
    folder = tmp_path_factory.mktemp("fleet")
    cases = {backend: _open(request, backend, folder) for backend in BACKENDS}
    for change in fleet():
        for case in cases.values():
            case.warehouse.apply(change)
    for manifest_id, rows in lineage().items():
        for case in cases.values():
            case.warehouse.append_lineage(manifest_id, rows)
    yield cases
    for case in cases.values():
        _close(request, case)


@pytest.mark.parametrize("sql", CURATIONS)
def test_same_curation_gives_the_same_rows(fleets: dict[str, Case], sql: str) -> None:
    lake, house = (fleets[b].query(sql) for b in BACKENDS)
    assert lake.num_rows > 0
    assert house.schema == lake.schema
    assert house.to_pylist() == lake.to_pylist()


def test_replay_leaves_the_data_version(case: Case) -> None:
    a = episode_row()
    first = batch(event(Op.CREATE, "episodes", 100, after=a))
    version = case.warehouse.apply(first)
    case.warehouse.apply(first)  # changes nothing: the LSN guard drops every row
    case.warehouse.apply(batch(event(Op.UPDATE, "episodes", 50, after={**a, "steps": 1})))
    assert case.warehouse.data_version(["episodes"]) == version


@pytest.mark.parametrize("backend", BACKENDS)
def test_maintenance_keeps_every_table_data_version(open_case: Opener, backend: str) -> None:
    case = open_case(backend, snapshot_retain_s=0.0)
    lake = case.warehouse
    a = episode_row()
    episodes = lake.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    lake.apply(batch(event(Op.UPDATE, "episodes", 200, after={**a, "steps": 2})))
    tasks = lake.apply(batch(event(Op.CREATE, "tasks", 300, after={"id": "t1"})))
    lake.apply(batch(lsn=400))  # a heartbeat
    version = lake.data_version(["episodes"])
    assert version == tasks - 1 and episodes < version
    report = lake.maintain()
    assert episodes in report.expired and version not in report.expired
    assert lake.data_version(["episodes"]) == version
    assert lake.data_version(["tasks"]) == tasks
    assert case.column("SELECT steps FROM episodes", snapshot_id=version) == [2]
    assert case.column("SELECT id FROM tasks", snapshot_id=tasks) == ["t1"]


def test_clickhouse_maintenance_trims_the_change_log(open_case: Opener) -> None:
    """``table_changes`` keeps only the rows a kept snapshot's data version reads, so it
    stops growing with every batch, and every kept snapshot's data versions stay as they were."""
    case = open_case("clickhouse", snapshot_retain_s=0.0)
    assert isinstance(case.config, ClickHouseConfig)
    changes = f"{case.config.database}_meta.table_changes"
    lake = case.warehouse
    a = episode_row()
    snapshots = [lake.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))]
    for i in range(2, 8):
        update = event(Op.UPDATE, "episodes", 100 * i, after={**a, "steps": i})
        snapshots.append(lake.apply(batch(update)))
    pinned, last_episodes = snapshots[2], snapshots[-1]
    snapshots.append(lake.apply(batch(_manifest(pinned, 900))))
    snapshots.append(lake.apply(batch(event(Op.CREATE, "tasks", 1000, after={"id": "t1"}))))
    views = ("episodes", "tasks", "manifests")
    before = {s: [lake.data_version([v], at=s) for v in views] for s in snapshots}

    report = lake.maintain()
    kept = [s for s in snapshots if s not in report.expired]
    assert pinned in kept and snapshots[1] in report.expired
    assert {s: [lake.data_version([v], at=s) for v in views] for s in kept} == {
        s: before[s] for s in kept
    }
    logged = lake.query_arrow(
        f"SELECT _commit FROM {changes} WHERE table_name = 'episodes' ORDER BY _commit"
    )
    assert logged.column(0).to_pylist() == [pinned, last_episodes]


# -- the CDC follower into ClickHouse ----------------------------------------------------


def _live_rows(case: Case, conn: Any, table: str) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """A mirrored table's live rows at the current snapshot, and Postgres's, comparable."""
    assert isinstance(case.config, ClickHouseConfig)
    meta = f"{case.config.database}_meta"
    columns, json_columns = table_columns(conn, table)
    names = ", ".join(f"`{c}`" for c in columns)
    live = case.warehouse.query_arrow(f"SELECT {names} FROM {meta}.live_{table}").to_pylist()
    rows = sorted(
        tuple(
            normalize(json.loads(r[c]) if c in json_columns and r[c] is not None else r[c])
            for c in columns
        )
        for r in live
    )
    return rows, source_rows(conn, table, columns)


def test_the_follower_mirrors_postgres_into_clickhouse(
    open_case: Opener, pg_conn: Any, pg_dsn: str
) -> None:
    """Snapshot, then stream (inserts, updates, deletes, a retraction, a truncate, a schema
    change), through the real follower: every mirrored table equals Postgres row for row."""
    case = open_case("clickhouse")
    lake = case.warehouse
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    config = CdcConfig(slot=f"quarry_{dbname}", poll_interval_s=0.05, heartbeat_interval_s=1.0)
    ids = seed(pg_conn, 12)
    try:
        with running(pg_dsn, lake, config) as follower:  # type: ignore[arg-type]
            wait_until(caught_up(pg_conn, lake, follower), what="initial snapshot")  # type: ignore[arg-type]
            assert lake.unloaded_tables() == []
            insert_episodes(pg_conn, 3)
            pg_conn.execute(
                "UPDATE episodes SET success = false, steps = steps + 1 WHERE id = ANY(%s::uuid[])",
                (ids[:4],),
            )
            pg_conn.execute("DELETE FROM episodes WHERE id = ANY(%s::uuid[])", (ids[4:6],))
            pg_conn.execute("UPDATE episodes SET status = 'retracted' WHERE id = %s", (ids[6],))
            pg_conn.execute("TRUNCATE episode_labels")
            pg_conn.execute("ALTER TABLE robots ADD COLUMN serial text")
            pg_conn.execute(
                "INSERT INTO robots (id, model, site, serial) VALUES ('r2', 'arm', 'lab', 'SN-2')"
            )
            wait_until(caught_up(pg_conn, lake, follower), what="streamed changes")  # type: ignore[arg-type]
        compared = 0
        for table in MIRRORED:
            mirrored, expected = _live_rows(case, pg_conn, table)
            assert mirrored == expected, f"{table} differs from Postgres"
            compared += len(expected)
        assert compared == 2 + 1 + 13 * 3  # robots, tasks, episodes, flags, stats (labels gone)
        assert dict(lake.describe_tables()["robots"].columns)["serial"] == "VARCHAR"
        assert case.column("SELECT count(*) AS n FROM episodes") == [12 + 3 - 2 - 1]
        assert case.column("SELECT count(*) AS n FROM episode_labels") == [0]
    finally:
        with cdc_connect(pg_dsn) as conn:
            drop_slot(conn, config.slot)


# -- ClickHouse only: commits made of plain inserts ----------------------------------------


def test_clickhouse_readers_never_see_an_unfinished_write(
    open_case: Opener, chdb: ChdbEngine
) -> None:
    """Rows tagged with a commit that has no ``commits`` row yet (a write in progress, or one
    that died) are invisible to every read, raw mirror included, and the next writer deletes
    what a dead one left."""
    case = open_case("clickhouse")
    assert isinstance(case.config, ClickHouseConfig)
    names = Databases.of(case.config.database)
    a = episode_row()
    done = case.warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    chdb.client.command(
        f"INSERT INTO {names.ident(names.mirror, 'episodes')} "
        "(id, steps, status, _lsn, _seq, _deleted, _commit) "
        f"VALUES ('{a['id']}', 99, 'active', 200, 1, false, {done + 1})"
    )
    raw = f"SELECT steps FROM {names.mirror}.episodes ORDER BY _lsn"
    assert case.column("SELECT steps FROM episodes") == [600]
    assert case.warehouse.query_arrow(raw).column(0).to_pylist() == [600]
    assert case.warehouse.data_version(["episodes"]) == done
    again = open_warehouse(case.config)  # a new writer process
    try:
        update = batch(event(Op.UPDATE, "episodes", 300, after={**a, "steps": 3}))
        assert again.apply(update) == done + 1
    finally:
        again.close()
    assert case.column("SELECT steps FROM episodes") == [3]
    assert case.warehouse.query_arrow(raw).column(0).to_pylist() == [600, 3]
    pinned = case.warehouse.query_arrow(raw, snapshot_id=done)
    assert pinned.column(0).to_pylist() == [600]


# -- one staging path: the follower's and Debezium's changes land alike ---------------------

EVERY_TYPE = """CREATE TABLE every_type (
    id integer PRIMARY KEY, flag boolean, small smallint, big bigint, ident oid, ratio real,
    precise double precision, price numeric(10,2), amount numeric, tag uuid, doc json,
    docb jsonb, raw bytea, at timestamptz, local_at timestamp, day date, note text,
    code varchar(20), letters char(4), names text[], counts integer[], flags boolean[],
    stamps timestamptz[], missing text)"""
EVERY_VALUE = """INSERT INTO every_type VALUES (1, true, -7, 9007199254740993, 4000000000, 0.25,
    1.1, 123.45, 1.5, '6f1c7d2e-8a41-4b57-9a35-2b0c1e7d9f10', '{"a": [1,  2]}',
    '{"b": {"c": null}}', '\\x00ff10', '2024-05-01 12:00:00.123456+00',
    '2018-06-20 15:13:16.945104', '2024-05-01', 'héllo, "world"', 'code-1', 'ab',
    ARRAY['x', 'y z', NULL], ARRAY[1, NULL, 3], ARRAY[true, false],
    ARRAY['2024-05-01 12:00:00+00'::timestamptz], NULL)"""


def _debezium_every_value(row_id: int) -> dict[str, Any]:
    """The row of EVERY_VALUE as Debezium's PostgreSQL connector encodes it by default
    (``decimal.handling.mode=precise``, ``time.precision.mode=adaptive``)."""
    return {
        "id": row_id,
        "flag": True,
        "small": -7,
        "big": 9007199254740993,
        "ident": 4000000000,
        "ratio": 0.25,
        "precise": 1.1,
        "price": base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode(),
        "amount": {"scale": 1, "value": base64.b64encode(b"\x0f").decode()},
        "tag": "6f1c7d2e-8a41-4b57-9a35-2b0c1e7d9f10",
        "doc": '{"a": [1,  2]}',
        "docb": '{"b": {"c": null}}',
        "raw": base64.b64encode(b"\x00\xff\x10").decode(),
        "at": "2024-05-01T12:00:00.123456Z",
        "local_at": 1529507596945104,
        "day": 19844,
        "note": 'héllo, "world"',
        "code": "code-1",
        "letters": "ab  ",
        "names": ["x", "y z", None],
        "counts": [1, None, 3],
        "flags": [True, False],
        "stamps": ["2024-05-01T12:00:00Z"],
        "missing": None,
    }


def _debezium(op: str, table: str, lsn: int, **rows: Any) -> dict[str, Any]:
    source = {"name": "pg", "schema": "public", "table": table, "lsn": lsn, "ts_ms": 1}
    return {"op": op, "source": {**source, "txId": lsn}, **rows}


def _transaction(relation: Relation, lsn: int, *changes: Insert | Update) -> list[Message]:
    """One source transaction as pgoutput streams it, committed at ``lsn``."""
    return [
        relation,
        Begin(final_lsn=lsn, commit_time_us=0, xid=lsn),
        *changes,
        Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 8, commit_time_us=0),
    ]


def _follower_batch(case: Case, key: Sequence[str], messages: list[Message]) -> ChangeBatch:
    """The messages through the follower's assembler and batch, after the stored position."""
    assembler = TransactionAssembler(
        lambda rel: Layout.of(rel.name, [c.name for c in rel.columns], key)
    )
    pending = PendingBatch()
    for message in messages:
        done = assembler.feed(message)
        if done is not None:
            pending.add(done)
    position = case.warehouse.position()
    assert position is not None
    return pending.change_batch(position)


def _mirror(case: Case) -> str:
    if not isinstance(case.config, ClickHouseConfig):
        return "mirror"
    return Databases.of(case.config.database).mirror


def test_debezium_values_of_every_type_land_as_the_followers(case: Case, pg_dsn: str) -> None:
    """One Postgres row, through Debezium's encoding and through pgoutput's text (a type's
    output function, what a text-format query returns under the follower's session
    options): the warehouse stores the same values."""
    with psycopg.connect(pg_dsn, autocommit=True, options=SESSION_OPTIONS) as conn:
        conn.execute(EVERY_TYPE)
        conn.execute(EVERY_VALUE)
        oid = conn.execute("SELECT 'every_type'::regclass::oid").fetchone()
        assert oid is not None
        spec = table_spec(conn, int(oid[0]), "public", "every_type")
        cursor = conn.execute("SELECT * FROM every_type")
        result = cursor.pgresult
        assert result is not None
        text = tuple(result.get_value(0, i) for i in range(result.nfields))
        types = [result.ftype(i) for i in range(result.nfields)]
    assert case.warehouse.ensure_table(spec)
    event = _debezium("c", "every_type", 8000, after=_debezium_every_value(2))
    apply_debezium(case.warehouse, event)
    names = [c.name for c in spec.columns]
    columns = tuple(RelationColumn(n == "id", n, t, -1) for n, t in zip(names, types, strict=True))
    relation = Relation(1, "public", "every_type", ReplicaIdentity.DEFAULT, columns)
    case.warehouse.apply(
        _follower_batch(case, spec.key, _transaction(relation, 9000, Insert(1, text)))
    )
    # bytea as hex: ClickHouse hands String columns to Arrow as UTF-8
    every = f"SELECT * EXCLUDE (raw), hex(raw) AS raw FROM {_mirror(case)}.every_type ORDER BY id"
    rows = case.query(every)
    follower, debezium = (
        {k: v for k, v in row.items() if k not in ("id", "_lsn", "_seq", "_commit")}
        for row in rows.to_pylist()
    )
    assert debezium == follower
    assert [name for name, value in follower.items() if value is None] == ["missing"]


def test_a_key_change_moves_the_row_alike_from_pgoutput_and_debezium(case: Case) -> None:
    """An update that changed the key: the old key is gone on both paths, and a re-delivered
    insert of it does not bring it back (its tombstone is newer)."""
    row = {"model": "arm", "site": "lab", "created_at": "2024-01-01T00:00:00Z"}
    moved = _debezium("u", "robots", 8010, before={"id": "dz-a"}, after={"id": "dz-b", **row})
    events = [_debezium("c", "robots", 8000, after={"id": "dz-a", **row}), moved]
    apply_debezium(case.warehouse, events)
    types = {"id": 25, "model": 25, "site": 25, "created_at": 1184}  # text, timestamptz
    columns = tuple(RelationColumn(n == "id", n, t, -1) for n, t in types.items())
    relation = Relation(1, "public", "robots", ReplicaIdentity.DEFAULT, columns)
    stamp = b"2024-01-01 00:00:00+00"
    insert = Insert(1, (b"pg-a", b"arm", b"lab", stamp))
    update = Update(1, (b"pg-a", None, None, None), True, (b"pg-b", b"arm", b"lab", stamp))
    messages = _transaction(relation, 9000, insert) + _transaction(relation, 9100, update)
    case.warehouse.apply(_follower_batch(case, ("id",), messages))
    apply_debezium(case.warehouse, events[0])  # re-delivered
    case.warehouse.apply(_follower_batch(case, ("id",), _transaction(relation, 9000, insert)))
    rows = case.rows("SELECT id, model, site, created_at FROM robots ORDER BY id")
    assert [r.pop("id") for r in rows] == ["dz-b", "pg-b"]
    assert rows[0] == rows[1]
