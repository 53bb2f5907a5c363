"""Data versions from DuckLake's snapshot log (``warehouse/ducklake/versions.py``): the raw change
kinds are classified as DuckLake's own ``snapshots()`` classifies them, the cached log answers
what a fresh read of the catalog answers, and maintenance neither moves a data version nor
expires the snapshot it names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.warehouse.conftest import batch, episode_row, event, robot
from warehouse.base import CURATION_VIEWS
from warehouse.changes import ColumnSpec, Op, TableSpec
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import MIRROR, DuckLakeWarehouse
from warehouse.ducklake.maintenance import MAINTENANCE_AUTHOR
from warehouse.ducklake.reader import LakeReader
from warehouse.ducklake.versions import (
    LakeVersions,
    SnapshotLog,
    last_change,
    parse_changes,
    split_changes,
    view_tables,
)

VIEWS = sorted({*CURATION_VIEWS, "episode_objects", "episode_stat_rows"})
#: View sets the log is checked on at every snapshot: tables apart and together, a table
#: made later, an unknown name.
CHECKED = [["episodes"], ["tasks"], ["manifests"], ["episode_stat_rows"], VIEWS, ["sites"]]
CHECKED += [["no_such_view"]]


def test_split_changes_keeps_quoted_commas_together() -> None:
    text = 'created_table:"mirror"."a,b",inserted_into_table:17,created_schema:"x""y"'
    assert split_changes(text) == [
        ("created_table", '"mirror"."a,b"'),
        ("inserted_into_table", "17"),
        ("created_schema", '"x""y"'),
    ]
    assert split_changes("") == []


@pytest.mark.parametrize(
    ("changes", "author", "maintenance", "schema", "tables"),
    [
        ("inserted_into_table:17,inlined_delete:21", "quarry-cdc", False, False, {"17", "21"}),
        ("deleted_from_table:17,inline_flush:17,inline_flush:21", None, True, False, {"17", "21"}),
        ("rewrite_delete:17", None, True, False, {"17"}),
        ("merge_adjacent:17,merge_adjacent:22", None, True, False, {"17", "22"}),
        ("deleted_from_table:17", MAINTENANCE_AUTHOR, True, False, {"17"}),
        ('created_table:"mirror"."sites",inlined_insert:22', None, False, True, {"22"}),
        ("altered_table:24", None, False, True, {"24"}),
        ('some_future_kind:"mirror"."x"', None, False, True, set()),  # unknown: every view
        ("some_future_kind:30", None, False, False, {"30"}),  # unknown, by id: that table
        (None, None, False, False, set()),  # a snapshot without a changes row
    ],
)
def test_parse_changes_classifies_each_kind(
    changes: str | None,
    author: str | None,
    maintenance: bool,
    schema: bool,
    tables: set[str],
) -> None:
    parsed = parse_changes(7, 1, changes, author)
    assert (parsed.maintenance, parsed.schema, set(parsed.tables)) == (maintenance, schema, tables)
    assert parsed.changes(frozenset({"17"})) == (not maintenance and (schema or "17" in tables))


def _oracle(reader: LakeReader, alias: str, views: list[str], at: int) -> int:
    """The data version as the warehouse computed it before the log: every snapshot from
    ``snapshots()``, classified by DuckLake's own parse of the changes."""
    definitions = reader.fetch(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = $1", [alias]
    )
    per_view = view_tables({str(n): str(q) for n, q in definitions}, MIRROR)
    names = sorted({t for view in views for t in per_view.get(view, frozenset({view}))})
    ids = [
        str(row[0])
        for row in reader.fetch(
            f"SELECT t.table_id FROM __ducklake_metadata_{alias}.ducklake_table t "
            f"JOIN __ducklake_metadata_{alias}.ducklake_schema s USING (schema_id) "
            "WHERE s.schema_name = $1 AND t.end_snapshot IS NULL "
            "AND list_contains($2, t.table_name)",
            [MIRROR, names],
        )
    ]
    snapshots = reader.fetch(
        f"SELECT snapshot_id, changes FROM {alias}.snapshots() WHERE snapshot_id <= $1 "
        "AND author IS DISTINCT FROM $2",
        [at, MAINTENANCE_AUTHOR],
    )
    found = last_change([(int(s), dict(c or {})) for s, c in snapshots], ids)
    return at if found is None else found


@pytest.fixture
def config(warehouse_config: WarehouseConfig) -> WarehouseConfig:
    """A lake that keeps nothing for long (retention 0) and inlines small batches."""
    return warehouse_config.model_copy(
        update={"snapshot_retain_s": 0.0, "data_inlining_row_limit": 5}
    )


@pytest.fixture
def lake(config: WarehouseConfig) -> Iterator[DuckLakeWarehouse]:
    with DuckLakeWarehouse(config) as warehouse:
        warehouse.bootstrap()
        yield warehouse


@pytest.fixture
def reader(config: WarehouseConfig, lake: DuckLakeWarehouse) -> Iterator[LakeReader]:
    """A reader of the test's own (nothing cached)."""
    own = LakeReader(config)
    yield own
    own.close()


def _fresh(reader: LakeReader, config: WarehouseConfig) -> LakeVersions:
    return LakeVersions(reader.fetch, config.alias, MIRROR)


def _task(n: int) -> dict[str, Any]:
    return {"id": f"t{n}", "description": "", "created_at": None}


def _every_kind_of_commit(lake: DuckLakeWarehouse) -> None:
    """Inserts (to files and inlined), updates, deletes, other tables, a heartbeat, a new
    table and a new column, then maintenance that expires nothing: a purge of tombstones,
    flushes, rewrites and merges (two small files of robots, each over the inlining limit,
    for it to merge)."""
    rows = [episode_row() for _ in range(12)]
    lake.apply(
        batch(*[event(Op.CREATE, "episodes", 100, i + 1, after=r) for i, r in enumerate(rows)])
    )
    lake.apply(batch(event(Op.CREATE, "robots", 110, after=robot())))
    for part in range(2):
        robots = [robot(f"m{part}-{i}") for i in range(6)]
        lake.apply(
            batch(
                *[
                    event(Op.CREATE, "robots", 111 + part, i + 1, after=r)
                    for i, r in enumerate(robots)
                ]
            )
        )
    lake.apply(batch(event(Op.UPDATE, "episodes", 120, after={**rows[0], "steps": 1})))
    for n in range(2, 11):
        lake.apply(batch(event(Op.DELETE, "episodes", 200 + n, before={"id": rows[n]["id"]})))
    lake.apply(batch(lsn=300))  # a heartbeat: only the CDC position moves
    lake.ensure_table(TableSpec("sites", (ColumnSpec("name", "text"),), ("name",)))
    lake.apply(batch(event(Op.CREATE, "sites", 310, after={"name": "a"})))
    columns = (ColumnSpec("name", "text"), ColumnSpec("city", "text"))
    lake.ensure_table(TableSpec("sites", columns, ("name",)))
    lake.apply(batch(event(Op.CREATE, "tasks", 320, after=_task(1))))
    time.sleep(0.05)
    report = lake.maintain(protect=range(lake.current_snapshot() + 100))  # its own too
    assert report.purged > 0 and report.expired == ()


def test_the_log_classifies_every_commit_as_snapshots_does(
    lake: DuckLakeWarehouse, reader: LakeReader, config: WarehouseConfig
) -> None:
    _every_kind_of_commit(lake)
    versions, alias = _fresh(reader, config), config.alias
    authors = [row[0] for row in reader.fetch(f"SELECT author FROM {alias}.snapshots()")]
    assert MAINTENANCE_AUTHOR in authors  # the purge is in the log
    kinds = {
        kind
        for (text,) in reader.fetch(
            f"SELECT changes_made FROM __ducklake_metadata_{alias}.ducklake_snapshot_changes"
        )
        for kind, _ in split_changes(str(text))
    }
    assert {"inline_flush", "rewrite_delete", "merge_adjacent", "altered_table"} <= kinds
    for at in range(lake.current_snapshot() + 1):
        for views in CHECKED:
            expected = _oracle(reader, alias, views, at)
            assert versions.data_version(views, at) == expected, (views, at)
            assert lake.data_version(views, at=at) == expected, (views, at)


def test_cached_versions_follow_new_commits(lake: DuckLakeWarehouse) -> None:
    first = lake.apply(batch(event(Op.CREATE, "episodes", 100, after=episode_row())))
    assert lake.data_version(["episodes"]) == first
    other = lake.apply(batch(event(Op.CREATE, "tasks", 110, after=_task(1))))
    assert lake.data_version(["episodes"]) == first  # episodes does not read tasks
    assert lake.data_version(["tasks"]) == other
    second = lake.apply(batch(event(Op.CREATE, "episodes", 120, after=episode_row())))
    assert lake.data_version(["episodes"], at=other) == first
    assert lake.data_version(["episodes"]) == second


def test_maintenance_keeps_data_versions_and_their_snapshots(
    lake: DuckLakeWarehouse, reader: LakeReader, config: WarehouseConfig
) -> None:
    rows = [episode_row() for _ in range(12)]
    episodes = lake.apply(
        batch(*[event(Op.CREATE, "episodes", 100, i + 1, after=r) for i, r in enumerate(rows)])
    )
    for n in range(1, 9):  # snapshots that maintenance may expire
        lake.apply(batch(event(Op.CREATE, "tasks", 100 + n, after=_task(n))))
    tasks = lake.data_version(["tasks"])
    before = {view: lake.data_version([view]) for view in VIEWS}
    assert before["episodes"] == episodes
    time.sleep(0.05)
    report = lake.maintain()
    assert {episodes, tasks} <= set(report.protected)
    assert episodes not in report.expired and tasks not in report.expired
    assert report.expired  # the other task commits went
    after = {view: lake.data_version([view]) for view in VIEWS}
    current = lake.current_snapshot()
    assert after == before
    assert {view: _fresh(reader, config).data_version([view], current) for view in VIEWS} == after
    pinned = lake.query_arrow("SELECT count(*) AS n FROM episodes", snapshot_id=episodes)
    assert pinned.to_pylist() == [{"n": 12}]


def test_an_expired_snapshot_resets_the_log(
    lake: DuckLakeWarehouse, reader: LakeReader, config: WarehouseConfig
) -> None:
    calls: list[list[Any]] = []

    def fetch(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        calls.append(params)
        return reader.fetch(sql, params)

    log = SnapshotLog(fetch, f"__ducklake_metadata_{config.alias}")
    for n in range(4):
        lake.apply(batch(event(Op.CREATE, "tasks", 100 + n, after=_task(n))))
    log.refresh()
    seen = lake.current_snapshot()
    log.refresh()
    assert calls == [[-1], [seen]]  # nothing new, nothing expired: one small read
    time.sleep(0.05)
    assert lake.maintain().expired
    log.refresh()
    assert calls[-2:] == [[seen], [-1]]  # fewer old snapshots: read again from the start
    fresh = SnapshotLog(reader.fetch, f"__ducklake_metadata_{config.alias}")
    fresh.refresh()
    current, tables = lake.current_snapshot(), frozenset(str(i) for i in range(100))
    for at in range(current + 1):
        assert log.data_version(tables, at) == fresh.data_version(tables, at)
