"""A caller's Arrow tables read by a warehouse query (``query_arrow(tables=...)``): by name,
unpinned, for that query only; bad names and values are refused with a clear error."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tests.warehouse.conftest import batch, episode_row, event
from warehouse.changes import Op
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.ducklake.pinning import prepare_query
from warehouse.errors import QueryError

SQL = "SELECT id FROM episodes WHERE id IN (SELECT episode_id FROM wanted) ORDER BY id"


def test_prepare_query_leaves_the_callers_tables_unpinned() -> None:
    sql = "SELECT * FROM episodes AS e JOIN wanted AS w ON w.id = e.id JOIN main.wanted AS q ON 1"
    text = prepare_query(sql, 7, unpinned=frozenset({"wanted"}))
    assert text.count("AT (VERSION => 7)") == 2  # episodes and the qualified main.wanted
    assert "wanted AS w" in text
    assert prepare_query("SELECT * FROM Wanted", 7, unpinned=frozenset({"wanted"})) == (
        "SELECT * FROM Wanted"
    )


def test_a_query_reads_the_callers_table_at_a_pinned_snapshot(
    warehouse: DuckLakeWarehouse,
) -> None:
    a, b = episode_row(), episode_row()
    first = warehouse.apply(batch(event(Op.CREATE, "episodes", 100, after=a)))
    warehouse.apply(batch(event(Op.CREATE, "episodes", 200, after=b)))
    wanted = pa.table({"episode_id": [a["id"], b["id"], "not-an-id"]})
    assert warehouse.query_arrow(SQL, tables={"wanted": wanted}).column(0).to_pylist() == sorted(
        [a["id"], b["id"]]
    )
    pinned = warehouse.query_arrow(SQL, snapshot_id=first, tables={"wanted": wanted})
    assert pinned.column(0).to_pylist() == [a["id"]]
    with pytest.raises(QueryError, match="wanted"):  # gone with the query's cursor
        warehouse.query_arrow(SQL)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("Wanted", pa.table({"x": [1]}), "lower-case identifiers"),
        ("wanted; DROP", pa.table({"x": [1]}), "lower-case identifiers"),
        ("", pa.table({"x": [1]}), "lower-case identifiers"),
        ("1st", pa.table({"x": [1]}), "lower-case identifiers"),
        ("episodes", pa.table({"id": ["x"]}), "has a table or view of that name"),
        ("episode_objects", pa.table({"id": ["x"]}), "has a table or view of that name"),
        ("wanted", {"episode_id": ["x"]}, "not a pyarrow.Table"),
        ("wanted", pa.record_batch({"episode_id": ["x"]}), "not a pyarrow.Table"),
    ],
)
def test_bad_tables_are_refused(
    warehouse: DuckLakeWarehouse, name: str, value: Any, message: str
) -> None:
    with pytest.raises(QueryError, match=message) as caught:
        warehouse.query_arrow("SELECT 1 AS one", tables={name: value})
    assert caught.value.context["sql"] == "SELECT 1 AS one"
