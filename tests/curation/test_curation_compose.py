"""The manifest query's shape (no warehouse): which curations carry the episode's columns
through their own scan and which are joined to ``episode_objects``, hidden column names, and
the statistics query (see tests/curation/test_curation_build.py for the same on a real lake)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sqlglot import exp

from curation.build import CURATION_RELATIONS, _cameras, _canonical_buffers
from curation.compose import (
    CURATED_IDS,
    OBJECTS_VIEW,
    PREVIEW_CARRY,
    STATS_VIEW,
    compose,
    preview_query,
    stats_query,
)
from curation.guard import CurationRefusedError, check_curation
from curation.projection import carrier

EPISODE_COLUMNS = ["id", "uri", "start_ns", "end_ns", "size_bytes", "sha256", "robot_id"]

CARRIED = [
    ("SELECT * FROM episodes", EPISODE_COLUMNS),
    ("SELECT id, robot_id FROM episodes WHERE success", ["id", "robot_id"]),
    ("SELECT e.id, e.robot_id FROM episodes AS e WHERE e.success", ["id", "robot_id"]),
    ("SELECT e.*, e.id AS episode_id FROM episodes e", [*EPISODE_COLUMNS, "episode_id"]),
    ("SELECT id AS episode_id FROM episodes ORDER BY started_at LIMIT 5", ["episode_id"]),
    ("SELECT id, row_number() OVER (ORDER BY id) AS n FROM episodes", ["id", "n"]),
    ("SELECT id FROM episodes QUALIFY row_number() OVER (PARTITION BY task_id) < 3", ["id"]),
    ("SELECT id FROM episodes WHERE id IN (SELECT max(id) FROM episodes)", ["id"]),
    ("SELECT id, start_ns + 1 AS start_ns, end_ns FROM Episodes", ["id", "start_ns", "end_ns"]),
]
JOINED = [
    ("SELECT DISTINCT id FROM episodes", ["id"]),
    ("SELECT id FROM episodes GROUP BY id", ["id"]),
    ("SELECT max(id) AS id FROM episodes", ["id"]),
    ("SELECT task_id AS id FROM episodes", ["id"]),
    ("SELECT id FROM episodes UNION ALL SELECT id FROM episodes", ["id"]),
    ("WITH c AS (SELECT id FROM episodes) SELECT id FROM c", ["id"]),
    ("SELECT e.id FROM episodes e JOIN robots r ON r.id = e.robot_id", ["id"]),
    ("SELECT e.id FROM episodes e, robots r", ["id"]),
    ("SELECT id FROM (SELECT id FROM episodes) AS episodes", ["id"]),
    ("SELECT episode_id AS id FROM episode_labels", ["id"]),
    ("SELECT * EXCLUDE (robot_id) FROM episodes", ["id", "uri"]),
    ("SELECT * REPLACE (task_id AS id) FROM episodes", ["id", "uri"]),
    ("SELECT id FROM episodes ORDER BY ALL", ["id"]),
    ("SELECT *, uri AS id FROM episodes", ["id", "uri", "id_1"]),
    ("SELECT E.id FROM episodes AS e", ["id"]),  # another name's case: kept conservative
]


@pytest.mark.parametrize(("sql", "columns"), CARRIED)
def test_curations_of_episode_rows_carry_the_manifest_columns(sql: str, columns: list[str]) -> None:
    checked = check_curation(sql, CURATION_RELATIONS)
    id_column = "episode_id" if "episode_id" in columns else "id"
    assert carrier(checked.tree, id_column, columns) is not None
    composed = compose(checked, columns, ("topics",))
    tables = {t.name for t in composed.tree.find_all(exp.Table)}
    assert OBJECTS_VIEW not in tables and "episodes" in {t.lower() for t in tables}


@pytest.mark.parametrize(("sql", "columns"), JOINED)
def test_other_curations_are_joined_to_episode_objects(sql: str, columns: list[str]) -> None:
    checked = check_curation(sql, CURATION_RELATIONS)
    assert carrier(checked.tree, "id", columns) is None
    composed = compose(checked, columns)
    assert OBJECTS_VIEW in {t.name for t in composed.tree.find_all(exp.Table)}
    assert "TRY_CAST" in composed.render()  # joined on the raw UUID, canonical text only


def test_hidden_columns_never_take_a_curations_own_name() -> None:
    sql = 'SELECT id, uri AS "_Quarry_Topics", robot_id AS __quarry_topics FROM episodes'
    checked = check_curation(sql, CURATION_RELATIONS)
    columns = ["id", "_Quarry_Topics", "__quarry_topics"]
    composed = compose(checked, columns, ("topics", "robot_id"))
    assert composed.hidden == {"topics": "___quarry_topics", "robot_id": "_quarry_robot_id"}
    assert composed.extras == ("_Quarry_Topics", "__quarry_topics")
    selected = [e.alias_or_name for e in composed.tree.expressions]
    assert selected[:6] == ["episode_id", "uri", "start_ns", "end_ns", "size_bytes", "sha256"]
    assert selected[6:] == [*columns[1:], "___quarry_topics", "_quarry_robot_id"]


@pytest.mark.parametrize(
    ("columns", "reason"),
    [(["robot_id"], "no_episode_id"), (["id", "robot_id", "robot_id"], "duplicate_column")],
)
def test_compose_refuses_curations_without_one_id_and_unique_columns(
    columns: list[str], reason: str
) -> None:
    checked = check_curation("SELECT * FROM episodes", CURATION_RELATIONS)
    with pytest.raises(CurationRefusedError) as caught:
        compose(checked, columns)
    assert caught.value.context["reason"] == reason


def test_preview_groups_by_the_carried_robot_and_task() -> None:
    checked = check_curation("SELECT id FROM episodes", CURATION_RELATIONS)
    composed = compose(checked, ["id"], PREVIEW_CARRY)
    text = preview_query(composed, 100).sql(dialect="duckdb")
    assert '"_quarry_robot_id" AS robot_id' in text.replace("counted.", "")
    assert "JOIN" not in text.upper()
    with pytest.raises(KeyError):  # a preview needs the columns it groups by
        preview_query(compose(checked, ["id"]), 100)


def test_statistics_read_the_curated_ids_and_the_stat_rows_only() -> None:
    tables = {t.name for t in stats_query().find_all(exp.Table)}
    assert tables == {STATS_VIEW, CURATED_IDS}


def test_cameras_are_the_sorted_camera_topics_of_every_rig() -> None:
    wrist = '{"topic": "/cam/wrist", "kind": "camera"}'
    rig = f'[{wrist}, {{"topic": "/state", "kind": "state"}}]'
    other = f'[{{"topic": "/cam/front", "kind": "camera"}}, {wrist}]'
    topics = pa.chunked_array([[rig, None, other, rig], ['[{"topic": "/imu"}]']])
    assert _cameras(topics) == ("/cam/front", "/cam/wrist")
    assert _cameras(pa.chunked_array([], type=pa.string())) == ()


def _with_under_nulls(values: list[int], valid: list[bool]) -> pa.Array:
    """An int64 array holding ``values`` even where it is null, as an engine may leave it."""
    bitmap = np.packbits(np.array(valid), bitorder="little")
    buffers = [pa.py_buffer(bitmap.tobytes()), pa.py_buffer(np.array(values, dtype=np.int64))]
    return pa.Array.from_buffers(pa.int64(), len(values), buffers, null_count=valid.count(False))


def _file_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_canonical_buffers_make_the_bytes_independent_of_what_lies_under_nulls() -> None:
    """DuckDB leaves the smallest int64 under a null timestamp, ClickHouse zero: the canonical
    table has the bytes of the whole table's filter either way, and copies only the columns
    with nulls or booleans."""
    valid = [True, False, True]
    ids = pa.array(["a", "b", "c"])
    tables = [
        pa.table(
            {
                "id": ids,
                "ended_at": _with_under_nulls([1, under, 3], valid),
                "success": pa.array([True, False, True]),
            }
        )
        for under in (-(2**63), 0)
    ]
    assert _file_bytes(tables[0]) != _file_bytes(tables[1])
    canonical = [_canonical_buffers(t) for t in tables]
    assert _file_bytes(canonical[0]) == _file_bytes(canonical[1])
    every_row = pa.array([True] * 3)
    assert _file_bytes(canonical[0]) == _file_bytes(tables[0].filter(every_row))
    kept = canonical[0]["id"].chunk(0).buffers()[2]
    assert kept is not None and kept.address == ids.buffers()[2].address  # not copied
    plain = pa.table({"id": ids})
    assert _canonical_buffers(plain) is plain
