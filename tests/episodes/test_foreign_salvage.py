"""Salvage of a recording cut off at the tail, as ``mcap recover`` does it.

The recording (~490 KB: two JPEG cameras and joint states, 32 KiB zstd chunks) is cut; what
salvage keeps is checked against mcap's own reader of the intact file: every message of the
chunks that end before the cut, and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcap.records import Message
from mcap.stream_reader import StreamReader
from mcap.writer import IndexType

from episodes._scan import SALVAGE_HINT, scan_file
from episodes.errors import ContainerError, TopicError
from episodes.foreign import ingest_mcap, read_recording
from episodes.mapping import mapping_from_dict
from episodes.quality import TRUNCATED
from episodes.survey import survey

from .foreign_files import (
    SALVAGE_CONFIG,
    source_episode,
    write_foxglove,
    write_ros2_without_actions,
)

MAPPING = mapping_from_dict({"robot": "ros-arm-06", "task": "stack"})


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = source_episode(seed=7, config=SALVAGE_CONFIG)
    return write_ros2_without_actions(tmp_path_factory.mktemp("salvage") / "bag.mcap", source)


def mcap_stream_messages(path: Path) -> int:
    """Messages mcap's own non-seeking reader yields from ``path`` before the damage stops it."""
    count = 0
    with path.open("rb") as stream:
        try:
            for record in StreamReader(stream).records:
                count += isinstance(record, Message)
        except Exception:  # EndOfFile, a zstd error or a CRC error: where the cut is
            return count
    raise AssertionError(f"{path} reads to the end: it is not damaged")


def cut(intact: Path, folder: Path, drop: int) -> Path:
    out = folder / f"cut-{drop}.mcap"
    out.write_bytes(intact.read_bytes()[:-drop])
    return out


def test_the_recording_has_the_size_the_issue_names(intact: Path) -> None:
    assert 400_000 < intact.stat().st_size < 540_000
    assert len(scan_file(intact).chunks) > 8


def test_a_cut_recording_is_refused_naming_the_flag(intact: Path, tmp_path: Path) -> None:
    damaged = cut(intact, tmp_path, 2048)
    with pytest.raises(ContainerError) as caught:
        read_recording(damaged, MAPPING)
    message = str(caught.value)
    assert "truncated" in message and SALVAGE_HINT in message and "\n" not in message
    assert caught.value.file == str(damaged) and caught.value.offset is not None


@pytest.mark.parametrize("drop", [2048, 20_000])
def test_salvage_keeps_every_whole_chunk_before_the_cut(
    intact: Path, tmp_path: Path, drop: int
) -> None:
    damaged = cut(intact, tmp_path, drop)
    rec = scan_file(damaged, salvage=True)
    assert rec.damage is not None and rec.damage.offset <= damaged.stat().st_size
    kept = sum(len(m) for m in rec.messages.values())
    assert kept == mcap_stream_messages(damaged) > 0
    assert all(c.offset + c.length <= rec.damage.offset for c in rec.chunks)
    whole = scan_file(intact)
    assert kept == sum(c.messages for c in whole.chunks if c.offset + c.length <= rec.damage.offset)
    if drop == 20_000:  # the cut runs through a chunk: it starts where the damage is
        assert rec.damage.offset in {c.offset for c in whole.chunks}
        assert kept < sum(len(m) for m in whole.messages.values())


def test_salvage_ingests_what_is_whole_with_the_truncated_flag(
    pg_conn: psycopg.Connection[Any], intact: Path, tmp_path: Path
) -> None:
    damaged = cut(intact, tmp_path, 20_000)
    (done,) = ingest_mcap(pg_conn, tmp_path, [damaged], mapping=MAPPING, salvage=True)
    assert TRUNCATED in done.flags and done.created
    offset = scan_file(damaged, salvage=True).damage.offset  # type: ignore[union-attr]
    row = pg_conn.execute(
        "SELECT qc_report FROM episodes WHERE id = %s", (done.episode_id,)
    ).fetchone()
    assert row is not None
    salvage = row[0]["salvage"]
    assert salvage["offset"] == offset and salvage["file_size"] == damaged.stat().st_size
    assert salvage["messages"] == mcap_stream_messages(damaged)
    assert TRUNCATED in row[0]["flags"]
    again = ingest_mcap(pg_conn, tmp_path, [damaged], mapping=MAPPING, salvage=True)
    assert not again[0].created


def test_survey_describes_the_damage(intact: Path, tmp_path: Path) -> None:
    damaged = cut(intact, tmp_path, 20_000)
    info = survey(damaged)
    assert info["damage"]["offset"] == scan_file(damaged, salvage=True).damage.offset  # type: ignore[union-attr]
    assert not info["indexed"]["summary"] and info["messages"] == mcap_stream_messages(damaged)


def test_salvage_with_no_whole_camera_message_registers_nothing(
    pg_conn: psycopg.Connection[Any], intact: Path, tmp_path: Path
) -> None:
    stub = tmp_path / "stub.mcap"
    stub.write_bytes(intact.read_bytes()[:3000])  # header and schemas, no whole chunk
    before = pg_conn.execute("SELECT count(*) FROM episodes").fetchone()
    with pytest.raises(TopicError) as caught:
        ingest_mcap(pg_conn, tmp_path, [stub], mapping=MAPPING, salvage=True)
    assert caught.value.file == str(stub) and "camera" in caught.value.message
    assert pg_conn.execute("SELECT count(*) FROM episodes").fetchone() == before


def test_salvage_of_an_unchunked_file_keeps_every_whole_message(tmp_path: Path) -> None:
    bare = dict(use_chunking=False, use_statistics=False, use_summary_offsets=False)
    bare |= dict(index_types=IndexType.NONE, repeat_channels=False, repeat_schemas=False)
    whole = write_foxglove(tmp_path / "bare.mcap", source_episode(seed=3), **bare)
    damaged = cut(whole, tmp_path, whole.stat().st_size // 3)
    rec = scan_file(damaged, salvage=True)
    kept = sum(len(m) for m in rec.messages.values())
    assert rec.chunks == [] and kept == mcap_stream_messages(damaged) > 0
    assert rec.damage is not None and rec.damage.offset < damaged.stat().st_size
