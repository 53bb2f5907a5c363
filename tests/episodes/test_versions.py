"""Sources and versions at ingest: a recording is kept in the landing area as the episode's
source; one registered before sources were kept gets it when ingested again; registering a
new container version moves the episode row and registering the current one changes
nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import psycopg

from episodes.foreign import file_sha256, ingest_recording, landing_path
from episodes.ingest import store_episode
from episodes.mapping import mapping_from_dict
from episodes.registry import register_episode
from episodes.synth import synth_episode
from episodes.versions import register_version, source_of, versions_of
from episodes.writer import WriteOptions
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2

from .conftest import SHORT


def test_a_recording_lands_as_the_source_also_when_registered_before(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    recording = write_ros2(tmp_path / "bag.mcap", source_episode(seed=6))
    mapping = mapping_from_dict(ROS2_MAPPING)
    objects = tmp_path / "objects"
    first = ingest_recording(pg_conn, objects, recording, mapping)
    source = source_of(pg_conn, first.episode_id)
    assert source is not None and source.kind == "mcap"
    landed = landing_path(objects, file_sha256(recording))
    assert source.uri == f"file://{landed}" and source.sha256 == file_sha256(landed)

    pg_conn.execute("DELETE FROM episode_sources")  # as registered before migration 0008
    landed.unlink()
    again = ingest_recording(pg_conn, objects, recording, mapping)
    assert not again.created
    assert source_of(pg_conn, first.episode_id) == source and landed.is_file()


def test_register_version_moves_the_row_once(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    episode = synth_episode(2, 0, SHORT)
    first = store_episode(episode, tmp_path, WriteOptions())
    assert register_episode(pg_conn, first.record, first.quality, first.stats)
    episode.stamps = dataclasses.replace(episode.stamps, pipeline_version=2)
    second = store_episode(episode, tmp_path, WriteOptions())
    assert second.record.uri != first.record.uri
    assert register_version(pg_conn, second.record, second.quality, second.stats)
    assert not register_version(pg_conn, second.record, second.quality, second.stats)
    versions = versions_of(pg_conn, episode.episode_id)
    assert [(v.version, v.uri, v.current) for v in versions] == [
        (1, first.record.uri, False),
        (2, second.record.uri, True),
    ]
    row = pg_conn.execute(
        "SELECT uri, sha256, pipeline_version FROM episodes WHERE id = %s", (episode.episode_id,)
    ).fetchone()
    assert row == (second.record.uri, second.record.sha256, 2)
    stats = pg_conn.execute(
        "SELECT count(*) FROM episode_stats WHERE episode_id = %s", (episode.episode_id,)
    ).fetchone()
    assert stats == (len(second.stats),)
