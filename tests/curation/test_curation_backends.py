"""DESIGN's promise, through the service's own build code: the same curation (SQL or
structured filters, with a sample spec) over the same mirrored data builds a manifest with
the same bytes, so the same ID, on DuckLake and on ClickHouse (chDB), and previews the same
counts. Both warehouses get the same change batches (tests/warehouse/fleet.py), so their
snapshot numbers, which the manifest records, agree too."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError

from curation.build import (
    CurationLimits,
    CurationRequest,
    build_at,
    check_request,
    rebuild_manifest,
    run_query,
)
from curation.cancel import CancelScope, CurationCancelledError
from curation.corpus import corpus_stats
from curation.filters import (
    CurationFilters,
    IntRange,
    LabelMatch,
    Split,
    TimeRange,
    compile_filters,
)
from curation.guard import check_curation
from curation.preview import preview_curation
from quarry.errors import ConfigError
from quarry.settings import CLICKHOUSE_DSN_ENV, Settings
from quarry.stack.lifecycle import Stack
from service.api.routes.sql import SqlQuery, run_sql
from service.context import ServiceContext
from service.runtime import CurationRuntime
from tests.fixtures.clickhouse import ChdbEngine
from tests.warehouse.fleet import fleet
from warehouse.backends import open_warehouse
from warehouse.base import CURATION_VIEWS, Warehouse
from warehouse.clickhouse.backend import ClickHouseWarehouse
from warehouse.config import ClickHouseConfig, WarehouseConfig

BACKENDS = ("ducklake", "clickhouse")
LIMITS = CurationLimits(timeout_s=60)
SPEC = {"anchor_stride": 3, "action_horizon": 8, "state_history": 4}

SQL_CURATIONS = [
    "SELECT * FROM episodes",
    "SELECT id, task_id, robot_model FROM episodes WHERE success AND site = 'lab'",
    # slices with an extra column, from a join (qualified columns named as DuckDB names them)
    "SELECT e.id, l.start_ns, l.end_ns, l.value FROM episodes AS e "
    "JOIN episode_labels AS l ON l.episode_id = e.id WHERE l.key = 'segment'",
    # the general path: joined to the internal episode objects on the raw UUID
    "SELECT id FROM episodes WHERE robot_id = 'r1' UNION "
    "SELECT episode_id AS id FROM episode_quality_flags WHERE flag = 'choppy_joints'",
    # ids that are no episode's canonical UUID text name no episode, on either engine
    "SELECT id FROM episodes WHERE robot_id = 'r2' UNION SELECT upper(id) AS id FROM episodes "
    "UNION SELECT replace(id, '-', '') AS id FROM episodes UNION SELECT 'x' AS id",
    "WITH q AS (SELECT episode_id, count(*) AS flags FROM episode_quality_flags "
    "GROUP BY episode_id) SELECT e.id, q.flags FROM episodes AS e JOIN q ON q.episode_id = e.id "
    "ORDER BY q.flags DESC, e.id LIMIT 7",
    # len() of a list is its size on both engines (sqlglot alone writes CHAR_LENGTH for it)
    "SELECT id, robot_id, operator FROM episodes WHERE robot_id = 'r1' AND success "
    "AND len(quality_flags) = 0 AND len(operator) = 3",
]
FILTERS = [
    CurationFilters(robots=["r1", "r2"], success=True, exclude_flags=["gripper_stuck"]),
    CurationFilters(
        labels=[LabelMatch(key="segment", values=["grasp0"])], robot_sw_versions=["1.0"]
    ),
    CurationFilters(
        pipeline_version=IntRange(min=2),
        started_at=TimeRange(start=datetime(2024, 1, 2, tzinfo=UTC)),
        split=Split(part="train", validation_fraction=0.25, seed="s"),
        per_task_cap=5,
        columns=["robot_id", "task_id", "operator"],
    ),
    CurationFilters(segments=LabelMatch(key="segment", values=["grasp1"]), tasks=["t2"]),
]
CURATIONS = SQL_CURATIONS + [compile_filters(f) for f in FILTERS]


@pytest.fixture(scope="module")
def sources(configs: dict[str, WarehouseConfig]) -> Iterator[dict[str, Warehouse]]:
    """Both backends holding the same fleet; a warehouse is the service's curation source."""
    warehouses = {name: open_warehouse(config) for name, config in configs.items()}
    try:
        for warehouse in warehouses.values():
            warehouse.bootstrap()
        for change in fleet():
            for warehouse in warehouses.values():
                warehouse.apply(change)
        yield warehouses
    finally:
        for warehouse in warehouses.values():
            warehouse.close()


def test_the_sources_read_each_backends_dialect(sources: dict[str, Warehouse]) -> None:
    assert {name: s.dialect for name, s in sources.items()} == {
        "ducklake": "duckdb",
        "clickhouse": "clickhouse",
    }
    snapshots = {s.current_snapshot() for s in sources.values()}
    assert len(snapshots) == 1, "the same batches give the same snapshot numbers"


@pytest.mark.parametrize("sql", CURATIONS)
def test_same_curation_same_manifest_bytes(
    sources: dict[str, Warehouse], tmp_path: Path, sql: str
) -> None:
    checked, spec = check_request(CurationRequest(sql, SPEC))
    built = {}
    for name, source in sources.items():
        snapshot = source.current_snapshot()
        info, meta, ids = build_at(checked, spec, snapshot, source, LIMITS, tmp_path / name)
        built[name] = (info, meta, ids)
    (lake, lake_meta, lake_ids), (house, house_meta, house_ids) = built.values()
    assert lake.num_rows > 0
    assert house_meta == lake_meta
    assert house_ids == lake_ids
    assert house.path.read_bytes() == lake.path.read_bytes()
    assert house.manifest_id == lake.manifest_id
    rebuilt = rebuild_manifest(
        lake.manifest_id, house_meta, sources["clickhouse"], tmp_path / "again", LIMITS
    )
    assert rebuilt.identical


@pytest.mark.parametrize("sql", [CURATIONS[1], CURATIONS[2], CURATIONS[-2]])
def test_same_curation_same_preview(sources: dict[str, Warehouse], sql: str) -> None:
    lake, house = (
        preview_curation(CurationRequest(sql, SPEC), sources[name], LIMITS).to_dict()
        for name in BACKENDS
    )
    assert lake["totals"]["slices"] > 0
    assert house == lake


def test_a_cancel_kills_the_running_clickhouse_query(sources: dict[str, Warehouse]) -> None:
    source = sources["clickhouse"]
    joined = ", ".join(f"episode_stats AS s{n}" for n in range(7))  # 48^7 rows
    total = " + ".join(f"s{n}.sum" for n in range(7))
    runaway = check_curation(
        f"SELECT count(*) AS n FROM {joined} WHERE {total} = -1.5", frozenset(CURATION_VIEWS)
    )
    scope = CancelScope()
    failure: list[BaseException] = []

    def build() -> None:
        with scope.active():
            try:
                run_query(runaway.tree, source, source.current_snapshot(), LIMITS, scope)
            except BaseException as error:  # reported to the test thread
                failure.append(error)

    thread = threading.Thread(target=build)
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    scope.cancel()
    thread.join(timeout=20)
    assert not thread.is_alive(), "the killed query still runs"
    assert time.monotonic() - started < 10
    assert len(failure) == 1 and isinstance(failure[0], CurationCancelledError)
    with pytest.raises(CurationCancelledError), scope.active():  # it starts nothing new
        run_query(runaway.tree, source, source.current_snapshot(), LIMITS, scope)


# -- the service, configured for ClickHouse ------------------------------------------------


def clickhouse_settings(state_dir: Path, config: WarehouseConfig) -> Settings:
    """Settings naming the ClickHouse warehouse ``config``, as the environment would."""
    assert isinstance(config, ClickHouseConfig)
    section = {"backend": "clickhouse", "dsn": config.dsn, "database": config.database}
    return Settings(state_dir=state_dir, warehouse=section)


def test_settings_select_clickhouse_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("QUARRY_WAREHOUSE__BACKEND", "clickhouse")
    monkeypatch.setenv(CLICKHOUSE_DSN_ENV, "https://writer:s3cret@ch.example.net:8443")
    monkeypatch.setenv("QUARRY_WAREHOUSE__DATABASE", "wh")
    config = Settings(state_dir=tmp_path).warehouse_config()
    assert config.backend == "clickhouse" and isinstance(config, ClickHouseConfig)
    assert config.server_dsn.endswith("@ch.example.net:8443")
    assert config.database == "wh"
    assert "s3cret" not in repr(Settings(state_dir=tmp_path))
    monkeypatch.delenv(CLICKHOUSE_DSN_ENV)
    with pytest.raises(ConfigError, match=CLICKHOUSE_DSN_ENV):
        Settings(state_dir=tmp_path).warehouse_config()
    monkeypatch.delenv("QUARRY_WAREHOUSE__BACKEND")
    with pytest.raises(ValidationError, match="database"):  # a ClickHouse field on DuckLake
        Settings(state_dir=tmp_path)
    monkeypatch.delenv("QUARRY_WAREHOUSE__DATABASE")
    assert Settings(state_dir=tmp_path).warehouse_config().backend == "ducklake"


def test_the_embedded_stack_refuses_chdb(chdb: ChdbEngine, tmp_path: Path) -> None:
    settings = clickhouse_settings(tmp_path, chdb.new_config())
    with pytest.raises(ConfigError, match="separate processes"):
        Stack(settings).up()
    assert list(tmp_path.iterdir()) == []  # refused before starting anything


def test_the_service_reads_and_curates_on_clickhouse(
    sources: dict[str, Warehouse],
    configs: dict[str, WarehouseConfig],
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """The service's own wiring on settings that name ClickHouse: its warehouse, POST
    /v1/sql, corpus statistics, and a curation built and registered by the runtime."""
    context = ServiceContext(
        clickhouse_settings(tmp_path, configs["clickhouse"]).service_settings()
    )
    runtime = CurationRuntime(
        context.settings, context.warehouse(), lambda: psycopg.connect(pg_dsn)
    )
    try:
        assert isinstance(context.warehouse(), ClickHouseWarehouse)
        assert runtime.source.dialect == "clickhouse"
        query = SqlQuery(
            sql="SELECT robot_id, count(*) AS n FROM episodes GROUP BY robot_id ORDER BY robot_id"
        )
        answer = json.loads(bytes(run_sql(query, context, None, None).body))  # type: ignore[arg-type]
        lake = sources["ducklake"].query_arrow(
            query.sql, snapshot_id=None, timeout_s=30, max_rows=100
        )
        assert answer["rows"] == [list(row.values()) for row in lake.to_pylist()]
        limits = {"timeout_s": 30.0, "max_rows": 1000}
        house_stats = corpus_stats(sources["clickhouse"], answer["snapshot_id"], **limits)
        lake_stats = corpus_stats(sources["ducklake"], answer["snapshot_id"], **limits)
        assert house_stats == lake_stats and house_stats["by_robot"]
        request = CurationRequest(CURATIONS[1], SPEC)
        result = runtime.curate(request)
        again = runtime.curate(request)
        assert again.reused and again.manifest_id == result.manifest_id
        checked, spec = check_request(request)
        lake_info, _, _ = build_at(
            checked, spec, result.snapshot_id, sources["ducklake"], LIMITS, tmp_path / "lake"
        )
        assert lake_info.manifest_id == result.manifest_id
    finally:
        runtime.close()
        context.close()
