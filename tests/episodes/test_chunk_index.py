"""A chunk's messages come through its message index, parsed only for the time asked; chunks
without an index are walked instead, and a damaged index is a ContainerError at the chunk."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from episodes._index import (
    MAX_CHUNK_BYTES,
    MAX_GAP_BYTES,
    ChunkRef,
    Source,
    close_runs,
    read_chunk,
    read_chunks,
)
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
        # the window's camera chunk, its state chunk and their indexes lie together: one read
        assert reader.chunk_reads == 2 and reader.requests - before == 1


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
        for name in ("_refs", "_window_refs", "_context_refs"):
            refs_of = getattr(walked, name)
            unindexed = {
                t: [replace(r, index_length=0) for r in refs] for t, refs in refs_of.items()
            }
            setattr(walked, name, unindexed)
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


def _ref(offset: int, length: int, index_length: int = 0) -> ChunkRef:
    return ChunkRef(offset, length, 0, 0, frozenset(), "", length, index_length)


def test_chunks_close_together_form_one_run() -> None:
    a = _ref(100, 50, 10)  # ends at 160
    b = _ref(160, 40)  # right after a
    c = _ref(200 + MAX_GAP_BYTES, 10)  # the largest gap a run takes along
    d = _ref(211 + 2 * MAX_GAP_BYTES, 10)  # one byte more
    assert close_runs([d, b, c, a]) == [[a, b, c], [d]]
    huge = _ref(0, MAX_CHUNK_BYTES - 5)
    assert close_runs([huge, _ref(MAX_CHUNK_BYTES - 5, 10)]) == [
        [huge],
        [_ref(MAX_CHUNK_BYTES - 5, 10)],
    ]


def test_a_run_parses_each_chunk_as_a_read_of_its_own(container: Path) -> None:
    with EpisodeReader(container) as reader:
        refs = reader.info.chunks[:4]
    runs = close_runs(refs)
    assert len(runs) == 1  # the writer puts a window's chunks and their indexes together
    with container.open("rb") as f:
        source = Source(f, str(container))
        together = read_chunks(source, runs[0])
        assert source.reads == 1
        for ref in refs:
            alone = read_chunk(source, ref)
            for channel in ref.channel_ids:
                got = [(m.sequence, m.data) for m in together[ref.offset].messages(channel)]
                assert got == [(m.sequence, m.data) for m in alone.messages(channel)]
