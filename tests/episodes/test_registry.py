"""Registration into the real operational schema (Postgres from pgserver, migrations applied)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import psycopg
import pytest

from episodes.ingest import ingest_synth, prepare_bytes, register
from episodes.quality import CAMERA_BLACKOUT
from episodes.synth import synth_episode
from episodes.writer import WriteOptions, write_episode

from .conftest import SHORT


def rows(conn: psycopg.Connection[Any], query: str) -> list[tuple[Any, ...]]:
    return conn.execute(query).fetchall()


def test_ingest_synth_registers_rows_flags_and_stats(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    results = ingest_synth(pg_conn, tmp_path, 3, seed=7, config=SHORT, workers=1)
    assert [r.created for r in results] == [True] * 3
    for result in results:
        path = Path(result.uri.removeprefix("file://"))
        assert result.uri.startswith("file:///") and path.is_absolute()
        data = path.read_bytes()
        folder = tmp_path.resolve() / "episodes" / result.robot_id / result.episode_id
        assert path == folder / f"{hashlib.sha256(data).hexdigest()[:16]}.mcap"
        assert (result.size_bytes, result.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    episodes = rows(
        pg_conn,
        "SELECT id::text, steps, schema_version, pipeline_version, "
        "robot_sw_version, topics, qc_report, status FROM episodes",
    )
    assert {e[0] for e in episodes} == {r.episode_id for r in results}
    for _, steps, schema_v, pipeline_v, sw, topics, qc, status in episodes:
        assert steps > 0 and schema_v == 1 and pipeline_v == 1 and sw and status == "active"
        assert {t["group"] for t in topics} == {"cameras", "state"}
        assert set(topics[0]) == {"topic", "group", "rate_hz", "kind"}
        assert qc["version"] == 1
    stats = rows(pg_conn, "SELECT field, count(*) FROM episode_stats GROUP BY field ORDER BY 1")
    assert stats == [("action", 3 * 7), ("state", 3 * 13)]
    assert rows(pg_conn, "SELECT count(*) FROM robots")[0][0] >= 1


def test_ingest_is_idempotent(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    first = ingest_synth(pg_conn, tmp_path, 2, seed=1, config=SHORT, workers=1)
    again = ingest_synth(pg_conn, tmp_path, 3, seed=1, config=SHORT, workers=1)
    assert [r.created for r in again] == [False, False, True]
    assert [r.sha256 for r in again[:2]] == [r.sha256 for r in first]
    assert rows(pg_conn, "SELECT count(*) FROM episodes")[0][0] == 3


def test_flags_are_stored(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    episode = synth_episode(2, 2, SHORT, faults=(CAMERA_BLACKOUT,))
    path = tmp_path / "e.mcap"
    write_episode(episode, path, WriteOptions())
    result = register(pg_conn, prepare_bytes(path.read_bytes(), "file://" + str(path)))
    assert result.flags == (CAMERA_BLACKOUT,)
    flags = rows(pg_conn, "SELECT episode_id::text, flag, detail FROM episode_quality_flags")
    assert [(f[0], f[1]) for f in flags] == [(episode.episode_id, CAMERA_BLACKOUT)]
    assert flags[0][2]["topics"][0]["topic"].startswith("/cam/")


def test_parallel_workers(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    results = ingest_synth(pg_conn, tmp_path, 4, seed=3, config=SHORT, workers=2)
    assert len({r.episode_id for r in results}) == 4
    assert rows(pg_conn, "SELECT count(*) FROM episode_stats")[0][0] == 4 * 20


@pytest.mark.slow
def test_fifty_episodes(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    results = ingest_synth(pg_conn, tmp_path, 50, seed=0)
    assert len(results) == 50 and all(r.created for r in results)
    flagged = rows(pg_conn, "SELECT count(DISTINCT episode_id) FROM episode_quality_flags")
    assert 1 <= flagged[0][0] <= 10
