"""The read API: pinned snapshots, time limit, row cap, lockdown, a reader in another process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.warehouse.conftest import batch, episode_row, event, robot
from warehouse.changes import ColumnSpec, Op, TableSpec
from warehouse.config import WarehouseConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.errors import QueryError, QueryTimeoutError, RowLimitError


def test_query_at_a_pinned_snapshot(warehouse: DuckLakeWarehouse) -> None:
    a = episode_row()
    first = warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    warehouse.apply(
        batch(
            event(Op.UPDATE, "episodes", 200, after={**a, "steps": 1}),
            event(Op.CREATE, "episodes", 200, 2, after=episode_row()),
        )
    )
    sql = "WITH e AS (SELECT * FROM episodes) SELECT steps FROM e ORDER BY steps"
    assert warehouse.query_arrow(sql, snapshot_id=first).column(0).to_pylist() == [600]
    assert warehouse.query_arrow(sql).column(0).to_pylist() == [1, 600]
    assert warehouse.current_snapshot() > first


def test_unknown_snapshot_is_a_query_error(warehouse: DuckLakeWarehouse) -> None:
    with pytest.raises(QueryError, match="snapshot"):
        warehouse.query_arrow("SELECT * FROM episodes", snapshot_id=10_000)


def test_runaway_query_is_interrupted(warehouse: DuckLakeWarehouse) -> None:
    with pytest.raises(QueryTimeoutError):
        warehouse.query_arrow("SELECT count(*) FROM range(100000000000)", timeout_s=0.3)
    assert warehouse.query_arrow("SELECT 1 AS one").column(0).to_pylist() == [1]


def test_row_cap(warehouse: DuckLakeWarehouse) -> None:
    with pytest.raises(RowLimitError):
        warehouse.query_arrow("SELECT * FROM range(1000)", max_rows=999)
    assert warehouse.query_arrow("SELECT * FROM range(1000)", max_rows=1000).num_rows == 1000


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SET enable_external_access = true",
        "ATTACH ':memory:' AS other",
        "SELECT 1; SELECT 2",
        "SELECT * FROM postgres_query('wh', 'SELECT 1')",
        "COPY (SELECT 1) TO '/tmp/quarry-escape.csv'",
    ],
)
def test_reader_is_locked_down(warehouse: DuckLakeWarehouse, sql: str) -> None:
    with pytest.raises(QueryError):
        warehouse.query_arrow(sql)


def test_reader_can_not_write(warehouse: DuckLakeWarehouse) -> None:
    with pytest.raises(QueryError):
        warehouse.query_arrow("DELETE FROM mirror.episodes")


def test_reader_in_another_process_while_the_writer_is_open(
    warehouse: DuckLakeWarehouse, warehouse_config: WarehouseConfig
) -> None:
    a = episode_row()
    warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    script = textwrap.dedent("""
        import sys
        from warehouse.config import DuckLakeConfig
        from warehouse.ducklake.backend import DuckLakeWarehouse
        config = DuckLakeConfig.model_validate_json(sys.stdin.read())
        with DuckLakeWarehouse(config) as lake:
            print(lake.query_arrow("SELECT id FROM episodes").column(0)[0])
    """)
    document = json.dumps(
        {
            "catalog_dsn": warehouse_config.catalog_dsn.get_secret_value(),
            "data_path": str(warehouse_config.data_path),
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=document,
        text=True,
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == a["id"]
    warehouse.apply(batch(event(Op.UPDATE, "episodes", 200, after={**a, "steps": 2})))


def test_a_reader_reads_on_after_a_mirrored_table_gains_a_column(
    warehouse: DuckLakeWarehouse,
) -> None:
    """A long-lived reader (the service's) that read a table while its rows were inlined in
    the catalog reads it on after the follower added a column (a source migration) and the
    writer flushed the inlined rows: DuckLake drops the inlined-data table the reader's
    catalog cache still names, and without a fresh start the next query failed (an INTERNAL
    "Attempted to access index 0 within vector of size 0" reading the list column, or
    "relation ducklake_inlined_data_... does not exist", then "current transaction is
    aborted" for every later one)."""
    warehouse.apply(batch(event(Op.CREATE, "robots", 100, after=robot("r1"))))
    sql = "SELECT id FROM robots ORDER BY id"
    assert warehouse.query_arrow(sql).column(0).to_pylist() == ["r1"]
    known = warehouse.describe_tables()["robots"]
    columns = tuple(ColumnSpec(name, "text") for name, _ in known.columns)
    grown = TableSpec("robots", (*columns, ColumnSpec("nicknames", "text[]")), known.key)
    assert warehouse.ensure_table(grown)
    for lsn, nicknames in ((200, []), (300, ["a"])):
        row = {**robot(f"r{lsn // 100}"), "nicknames": nicknames}
        warehouse.apply(batch(event(Op.CREATE, "robots", lsn, after=row)))
        assert warehouse.query_arrow(sql).num_rows == lsn // 100
    warehouse.flush_inlined()
    for _ in range(2):
        assert warehouse.query_arrow(sql).column(0).to_pylist() == ["r1", "r2", "r3"]
        pinned = warehouse.query_arrow(sql, snapshot_id=warehouse.current_snapshot())
        assert pinned.column(0).to_pylist() == ["r1", "r2", "r3"]
