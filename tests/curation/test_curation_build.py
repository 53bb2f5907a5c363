"""The manifest build against a real lake of bulk rows (no service): one pass over the data,
the same bytes on a rebuild however the engine's threads add, the same rows whichever way the
manifest query is composed, and previews that agree with builds."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from curation.build import (
    CurationLimits,
    CurationRequest,
    build_at,
    check_request,
    rebuild_manifest,
)
from curation.preview import preview_curation
from manifests.manifest import open_manifest
from tests.fixtures.lake_rows import add_bulk_episodes
from warehouse.ducklake.backend import DuckLakeWarehouse

EPISODES = 15_000  # x 20 statistics rows: 300,000 terms in the normalization sums
LIMITS = CurationLimits(timeout_s=120)
SPEC = {"anchor_stride": 7}


@pytest.fixture(scope="module")
def lake(postgres: object, tmp_path_factory: pytest.TempPathFactory) -> DuckLakeWarehouse:
    from tests.fixtures.warehouse import new_warehouse_config

    config = new_warehouse_config(postgres, tmp_path_factory.mktemp("bulk"))  # type: ignore[arg-type]
    config = config.model_copy(update={"reader_threads": 4})  # more threads, more orders
    warehouse = DuckLakeWarehouse(config)
    warehouse.bootstrap()
    add_bulk_episodes(config, EPISODES)
    return warehouse


def build(lake: DuckLakeWarehouse, sql: str, out: Path) -> tuple[str, pa.Table, dict[str, object]]:
    checked, spec = check_request(CurationRequest(sql, SPEC))
    info, meta, _ = build_at(checked, spec, lake.current_snapshot(), lake, LIMITS, out)
    return info.manifest_id, open_manifest(info.path).table(), dict(meta.norm_stats or {})


def test_a_rebuild_at_scale_gives_the_same_bytes(lake: DuckLakeWarehouse, tmp_path: Path) -> None:
    sql = "SELECT id, task_id FROM episodes WHERE robot_id <> 'r1'"
    first, table, _ = build(lake, sql, tmp_path / "a")
    for attempt in range(3):
        again, _, _ = build(lake, sql, tmp_path / f"again-{attempt}")
        assert again == first
    meta = open_manifest(tmp_path / "a" / f"{first}.arrow").meta
    rebuilt = rebuild_manifest(first, meta, lake, tmp_path / "rebuild", LIMITS)
    assert rebuilt.identical and rebuilt.rebuilt_id == first
    assert table.num_rows == 9_897  # 2/3 of the episodes, less the retracted ones


def test_statistics_are_the_exact_sums_of_the_episodes_terms(
    lake: DuckLakeWarehouse, tmp_path: Path
) -> None:
    sql = "SELECT id FROM episodes WHERE success"
    _, table, stats = build(lake, sql, tmp_path)
    terms = lake.query_arrow(
        "SELECT s.field, s.dim, s.sum, s.sum_sq FROM episode_stats s "
        "JOIN episodes e ON e.id = s.episode_id WHERE e.success ORDER BY s.field, s.dim"
    ).to_pylist()
    for field in ("state", "action"):
        for dim in range(10):
            rows = [t for t in terms if t["field"] == field and t["dim"] == dim]
            entry = stats[field]
            assert isinstance(entry, dict)
            assert entry["sum"][dim] == math.fsum(t["sum"] for t in rows)
            assert entry["sum_sq"][dim] == math.fsum(t["sum_sq"] for t in rows)
            assert entry["count"] == 100 * table.num_rows


@pytest.mark.parametrize(
    ("carried", "joined"),
    [
        (
            "SELECT id, task_id FROM episodes WHERE success",
            "SELECT id, task_id FROM episodes WHERE success UNION ALL "
            "SELECT id, task_id FROM episodes WHERE false",
        ),
        (
            "SELECT e.*, e.id AS episode_id FROM episodes AS e WHERE e.task_id = 't2'",
            "WITH c AS (SELECT *, id AS episode_id FROM episodes WHERE task_id = 't2') "
            "SELECT * FROM c",
        ),
        (
            "SELECT id, start_ns + 1000 AS start_ns, end_ns + 1000 AS end_ns FROM episodes "
            "WHERE robot_id = 'r2' ORDER BY start_ns DESC LIMIT 500",
            "SELECT DISTINCT id, start_ns + 1000 AS start_ns, end_ns + 1000 AS end_ns "
            "FROM episodes WHERE robot_id = 'r2' ORDER BY start_ns DESC LIMIT 500",
        ),
    ],
)
def test_carried_and_joined_manifest_queries_give_the_same_rows(
    lake: DuckLakeWarehouse, tmp_path: Path, carried: str, joined: str
) -> None:
    _, by_carrying, carried_stats = build(lake, carried, tmp_path / "carried")
    _, by_joining, joined_stats = build(lake, joined, tmp_path / "joined")
    assert by_carrying.num_rows > 0
    assert by_carrying.equals(by_joining)
    assert carried_stats == joined_stats


def test_preview_totals_are_the_manifests(lake: DuckLakeWarehouse, tmp_path: Path) -> None:
    for sql in (
        "SELECT id, robot_id FROM episodes WHERE task_id IN ('t1', 't3')",
        "SELECT id FROM episodes WHERE task_id IN ('t1', 't3') UNION ALL SELECT 'x' AS id",
    ):
        preview = preview_curation(CurationRequest(sql, SPEC), lake, LIMITS)
        _, table, _ = build(lake, sql, tmp_path / str(len(sql)))
        assert preview.totals.slices == table.num_rows
        assert preview.totals.samples == sum(table["num_samples"].to_pylist())
        assert {g.robot_id for g in preview.groups} == {"r0", "r1", "r2"}


def test_only_the_canonical_text_of_a_live_episodes_uuid_names_it(
    lake: DuckLakeWarehouse, tmp_path: Path
) -> None:
    live = "c0000000-0000-4000-8000-000000000001"
    retracted = "c0000000-0000-4000-8000-000000000061"  # episode 97
    ids = [live, live.upper(), "{" + live + "}", live.replace("-", ""), "nope", retracted]
    sql = " UNION ALL ".join(f"SELECT '{i}' AS id" for i in ids) + " UNION ALL SELECT NULL"
    _, table, _ = build(lake, sql, tmp_path)
    assert table["episode_id"].to_pylist() == [live]


def test_a_curations_own_column_named_like_a_hidden_one(
    lake: DuckLakeWarehouse, tmp_path: Path
) -> None:
    carried = (
        "SELECT id, robot_id AS _quarry_topics FROM episodes WHERE task_id = 't1' "
        "ORDER BY id LIMIT 30"
    )
    joined = f"SELECT * FROM ({carried}) UNION ALL SELECT 'x', 'y'"
    for sql in (carried, joined):
        checked, spec = check_request(CurationRequest(sql, SPEC))
        info, meta, _ = build_at(checked, spec, lake.current_snapshot(), lake, LIMITS, tmp_path)
        table = open_manifest(info.path).table()
        assert table.num_rows == 30
        assert set(table["_quarry_topics"].to_pylist()) <= {"r0", "r1", "r2"}
        assert meta.sample_spec["cameras"] == ["/cam/front", "/cam/wrist"]
