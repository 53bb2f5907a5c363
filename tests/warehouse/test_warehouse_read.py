"""The read API: pinned snapshots, time limit, row cap, lockdown, a reader in another process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.warehouse.conftest import batch, episode_row, event
from warehouse.changes import Op
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
