"""A chunk's messages come through its message index, parsed only for the time asked; chunks
without an index are walked instead, and a damaged index is a ContainerError at the chunk."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from episodes._index import ChunkRef, Source, read_chunk
from episodes.episode import EpisodeData
from episodes.errors import ContainerError
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec

SPEC = SampleSpec()


def _chunk_and_reader(container: Path) -> tuple[EpisodeReader, ChunkRef]:
    reader = EpisodeReader(container)
    return reader, reader.info.chunks[2]


def _all_messages(container: Path, ref: ChunkRef) -> dict[int, list[tuple[int, int, bytes]]]:
    with container.open("rb") as f:
        chunk = read_chunk(Source(f, str(container)), ref)
        return {
            ch: [(m.sequence, m.log_time, m.data) for m in chunk.messages(ch)]
            for ch in ref.channel_ids
        }


def test_index_follows_every_chunk_and_is_read_with_it(container: Path) -> None:
    reader, _ = _chunk_and_reader(container)
    with reader:
        assert all(ref.index_length > 0 for ref in reader.info.chunks)
        before = reader.requests
        reader.read_sample(reader.info.start_ns + 10**9, SPEC)
        assert reader.requests - before == reader.chunk_reads


def test_a_range_gives_its_messages_and_one_neighbour_each_side(container: Path) -> None:
    reader, ref = _chunk_and_reader(container)
    reader.close()
    arrays = {t.window_channel_id for t in reader.info.topics.values()}  # one per window
    for channel, every in _all_messages(container, ref).items():
        if channel in arrays:
            continue
        times = [t for _, t, _ in every]
        assert times == sorted(times) and len(every) > 4
        lo, hi = times[2], times[-3]
        with container.open("rb") as f:
            chunk = read_chunk(Source(f, str(container)), ref)
            got = [(m.sequence, m.log_time, m.data) for m in chunk.messages(channel, lo, hi)]
            assert got == every[1:-1]
            inside = chunk.messages(channel, lo + 1, lo + 1)
            assert [m.log_time for m in inside] == times[2:4]
            assert chunk.messages(channel + 1000) == []


def test_a_chunk_without_an_index_is_walked(container: Path) -> None:
    reader, ref = _chunk_and_reader(container)
    reader.close()
    assert _all_messages(container, replace(ref, index_length=0)) == _all_messages(container, ref)


def test_samples_are_the_same_with_and_without_indexes(
    container: Path, episode: EpisodeData
) -> None:
    with EpisodeReader(container) as indexed, EpisodeReader(container) as walked:
        walked._refs = {
            t: [replace(r, index_length=0) for r in refs] for t, refs in walked._refs.items()
        }
        for anchor in range(episode.start_ns + 10**8, episode.end_ns, 7 * 10**8):
            a, b = indexed.read_sample(anchor, SPEC), walked.read_sample(anchor, SPEC)
            assert a.state.tobytes() == b.state.tobytes()
            assert a.actions.tobytes() == b.actions.tobytes()
            assert all((a.frames[k] == b.frames[k]).all() for k in a.frames)
        assert walked.bytes_read < indexed.bytes_read


def _damaged_index(container: Path, tmp_path: Path, offset: int | None) -> tuple[Path, ChunkRef]:
    """A copy of ``container`` whose third chunk's first message index entry points at
    ``offset`` (None: one byte past the record it named)."""
    reader, ref = _chunk_and_reader(container)
    reader.close()
    data = bytearray(container.read_bytes())
    # The first index record's first entry: opcode, length, channel, pairs length, then
    # (log time, offset).
    entry = ref.offset + ref.length + 1 + 8 + 2 + 4
    (was,) = struct.unpack_from("<Q", data, entry + 8)
    struct.pack_into("<Q", data, entry + 8, was + 1 if offset is None else offset)
    bad = tmp_path / "bad_index.mcap"
    bad.write_bytes(bytes(data))
    return bad, ref


def test_an_index_entry_that_misses_its_record_is_a_container_error(
    container: Path, tmp_path: Path
) -> None:
    bad, ref = _damaged_index(container, tmp_path, None)
    with bad.open("rb") as f:
        chunk = read_chunk(Source(f, str(bad)), ref)
        with pytest.raises(ContainerError) as caught:
            for channel in ref.channel_ids:
                chunk.messages(channel)
    assert caught.value.offset == ref.offset and caught.value.file == str(bad)


def test_an_index_pointing_outside_the_chunk_is_a_container_error(
    container: Path, tmp_path: Path
) -> None:
    _, ref = _chunk_and_reader(container)
    bad, ref = _damaged_index(container, tmp_path, ref.uncompressed_size + 10)
    with bad.open("rb") as f, pytest.raises(ContainerError) as caught:
        read_chunk(Source(f, str(bad)), ref)
    assert caught.value.offset == ref.offset and "outside the chunk" in str(caught.value)
