"""Bad input gets an EpisodeError naming the file, topic and offset, and errors pickle."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from episodes.episode import EpisodeData
from episodes.errors import (
    ContainerError,
    EpisodeError,
    RangeError,
    SchemaError,
    SourceError,
    SpecError,
    TopicError,
)
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec

from .rewrite import rewrite

SPEC = SampleSpec()


def test_truncated_container(container: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.mcap"
    data = container.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ContainerError) as caught:
        EpisodeReader(cut)
    assert caught.value.file == str(cut) and caught.value.offset == len(data) // 2
    assert not caught.value.retryable
    assert str(cut) in str(caught.value)


def test_corrupt_chunk_names_its_offset(
    container: Path, episode: EpisodeData, tmp_path: Path
) -> None:
    with EpisodeReader(container) as reader:
        chunk = reader.info.chunks[3]
    data = bytearray(container.read_bytes())
    middle = chunk.offset + chunk.length // 2
    data[middle : middle + 64] = bytes(64)
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(bytes(data))
    with EpisodeReader(bad) as reader:
        anchor = max(chunk.start_ns, episode.start_ns + 10**9)
        with pytest.raises(ContainerError) as caught:
            for offset in range(0, 2 * 10**9, 10**8):
                reader.read_sample(anchor + offset, SPEC)
    assert caught.value.offset == chunk.offset and caught.value.file == str(bad)


def test_not_an_mcap_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not a container at all" * 10)
    with pytest.raises(ContainerError):
        EpisodeReader(junk)


def test_missing_file_is_not_retryable(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as caught:
        EpisodeReader(tmp_path / "absent.mcap")
    assert not caught.value.retryable


def test_missing_topic(container: Path, tmp_path: Path) -> None:
    damaged = rewrite(container, tmp_path / "nowrist.mcap", drop=("/cam/wrist",))
    with pytest.raises(TopicError) as caught:
        EpisodeReader(damaged)
    assert caught.value.topic == "/cam/wrist" and caught.value.file == str(damaged)


def test_wrong_message_encoding(container: Path, tmp_path: Path) -> None:
    damaged = rewrite(container, tmp_path / "cdr.mcap", encodings={"/state/gripper": "cdr"})
    with pytest.raises(SchemaError) as caught:
        EpisodeReader(damaged)
    assert caught.value.topic == "/state/gripper"


def test_wrong_schema_body(container: Path, tmp_path: Path) -> None:
    damaged = rewrite(
        container, tmp_path / "schema.mcap", schemas={"/action": b'{"type": "frame"}'}
    )
    with pytest.raises(SchemaError) as caught:
        EpisodeReader(damaged)
    assert caught.value.topic == "/action" and caught.value.file == str(damaged)


def test_vector_of_the_wrong_width(container: Path, tmp_path: Path) -> None:
    damaged = rewrite(
        container,
        tmp_path / "wide.mcap",
        edit=lambda topic, data: data + b"\0\0\0\0" if topic == "/action" else data,
    )
    with EpisodeReader(damaged) as reader, pytest.raises(SchemaError) as caught:
        reader.read_vectors("/action")
    assert caught.value.topic == "/action" and caught.value.file == str(damaged)


@pytest.mark.parametrize("shift", [-1, 0])
def test_anchor_outside_the_episode(container: Path, episode: EpisodeData, shift: int) -> None:
    anchor = episode.start_ns - 1 if shift else episode.end_ns
    with EpisodeReader(container) as reader, pytest.raises(RangeError) as caught:
        reader.read_sample(anchor, SPEC)
    assert caught.value.file == str(container) and str(anchor) in caught.value.message


@pytest.mark.parametrize("where", ["before", "after", "empty"])
def test_time_range_outside_the_episode(container: Path, episode: EpisodeData, where: str) -> None:
    start, end = episode.start_ns, episode.end_ns
    bounds = {"before": (start - 10**9, start), "after": (end, end + 10**9), "empty": (end, start)}
    with EpisodeReader(container) as reader, pytest.raises(RangeError) as caught:
        reader.read_vectors("/state/gripper", *bounds[where])
    error = caught.value
    assert (error.file, error.topic) == (str(container), "/state/gripper")
    assert str(start) in error.message and str(end) in error.message


def test_time_range_reads_only_its_chunks(container: Path, episode: EpisodeData) -> None:
    lo, hi = episode.start_ns + 2 * 10**9, episode.start_ns + 3 * 10**9
    with EpisodeReader(container) as reader:
        times, values = reader.read_vectors("/action", lo, hi)
        assert reader.chunk_reads == 1  # window 1's state chunk
    want = episode.vector("actions")
    inside = (want.timestamps_ns >= lo) & (want.timestamps_ns < hi)
    assert times.tolist() == want.timestamps_ns[inside].tolist()
    assert values.shape == (int(inside.sum()), 7)


def test_unknown_topic(container: Path) -> None:
    with EpisodeReader(container) as reader, pytest.raises(TopicError) as caught:
        reader.read_vectors("/nope")
    assert caught.value.topic == "/nope"


def test_spec_must_be_a_spec(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader, pytest.raises(SpecError):
        reader.read_sample(episode.start_ns, {"control_hz": 50})  # type: ignore[arg-type]


def test_errors_pickle_with_their_attributes() -> None:
    errors = [
        ContainerError("corrupt chunk", file="s3://b/e.mcap", offset=123),
        TopicError("missing", file="f", topic="/cam/front"),
        SourceError("timeout", file="f"),
    ]
    for error in errors:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and isinstance(back, EpisodeError)
        assert (back.file, back.topic, back.offset, back.retryable) == (
            error.file,
            error.topic,
            error.offset,
            error.retryable,
        )
        assert str(back) == str(error)
    assert errors[2].retryable and not errors[0].retryable
