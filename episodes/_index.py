"""Low-level container access: the summary, the metadata record and whole chunks.

Reads go through :class:`Source`, one ``read`` per record, so a remote file object (an fsspec
file opened without read-ahead) costs one request per summary, metadata record or chunk (a
chunk's read takes the message index records that follow it along). Sizes read from the file
are bounded before anything is allocated.

A chunk is decompressed and CRC-checked whole, but its message records are parsed only when
asked for, by channel and time range, through the chunk's message index: a sample needs a
fraction of a window's records (frames up to its anchor, a short state and action window), and
walking every record in Python was most of a chunk's parsing time.
"""

from __future__ import annotations

import io
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import numpy.typing as npt
from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import (
    Channel,
    Chunk,
    ChunkIndex,
    Message,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
)
from mcap.stream_reader import StreamReader, get_chunk_data_stream

from .errors import ContainerError, SourceError

MAGIC = b"\x89MCAP0\r\n"
_FOOTER = struct.Struct("<BQQQI")  # opcode, record length, summary start, summary offsets, crc
_TAIL_BYTES = 64 * 1024
#: Largest summary section accepted, bytes.
MAX_SUMMARY_BYTES = 64 * 1024 * 1024
#: Largest chunk accepted, bytes.
MAX_CHUNK_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class ChunkRef:
    """Where a chunk lies (byte offset and length) and what it holds (log times in ns)."""

    offset: int
    length: int
    start_ns: int
    end_ns: int
    channel_ids: frozenset[int]
    compression: str
    uncompressed_size: int
    #: bytes of the chunk's message index records, which follow it in the file (0: none).
    index_length: int = 0


@dataclass
class Summary:
    """The parsed summary section of a container."""

    size: int
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    chunks: list[ChunkRef] = field(default_factory=list)
    metadata: dict[str, MetadataIndex] = field(default_factory=dict)
    statistics: Statistics | None = None


class Source:
    """A seekable binary file with its display name, counting reads and bytes read."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self.stream, self.name = stream, name
        self.reads = 0
        self.bytes_read = 0
        #: seconds spent inside read calls (the I/O alone), summed.
        self.seconds = 0.0

    def size(self) -> int:
        """Total size in bytes."""
        try:
            return int(self.stream.seek(0, os.SEEK_END))
        except OSError as exc:
            raise SourceError(f"cannot seek: {exc}", file=self.name) from exc

    def read_at(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``, in one read call."""
        started = time.perf_counter()
        try:
            self.stream.seek(offset)
            data = self.stream.read(length)
        except OSError as exc:
            raise SourceError(f"read failed: {exc}", file=self.name, offset=offset) from exc
        self.seconds += time.perf_counter() - started
        self.reads += 1
        self.bytes_read += len(data)
        if len(data) != length:
            raise ContainerError(
                f"container truncated: wanted {length} bytes, got {len(data)}",
                file=self.name,
                offset=offset,
            )
        return data


def read_summary(src: Source) -> Summary:
    """Parse the footer and the summary section (one read, two when the summary is large)."""
    size = src.size()
    if size < 2 * len(MAGIC) + _FOOTER.size:
        raise ContainerError(f"file of {size} bytes is too small to be MCAP", file=src.name)
    tail_start = max(0, size - _TAIL_BYTES)
    tail = src.read_at(tail_start, size - tail_start)
    if tail[-len(MAGIC) :] != MAGIC:
        raise ContainerError("no MCAP magic at the end: truncated?", file=src.name, offset=size)
    footer_at = size - len(MAGIC) - _FOOTER.size
    opcode, _, summary_start, _, _ = _FOOTER.unpack_from(tail, footer_at - tail_start)
    if opcode != Opcode.FOOTER or summary_start == 0 or summary_start > footer_at:
        raise ContainerError("no summary section (unindexed)", file=src.name, offset=footer_at)
    if footer_at - summary_start > MAX_SUMMARY_BYTES:
        raise ContainerError("summary section too large", file=src.name, offset=summary_start)
    if summary_start >= tail_start:
        data = tail[summary_start - tail_start :]
    else:
        data = src.read_at(summary_start, size - summary_start)
    return _parse_summary(data, size, src.name, summary_start)


def _parse_summary(data: bytes, size: int, name: str, at: int) -> Summary:
    summary = Summary(size=size)
    reader = StreamReader(io.BytesIO(data), skip_magic=True, record_size_limit=MAX_SUMMARY_BYTES)
    try:
        for record in reader.records:
            if isinstance(record, Schema):
                summary.schemas[record.id] = record
            elif isinstance(record, Channel):
                summary.channels[record.id] = record
            elif isinstance(record, ChunkIndex):
                summary.chunks.append(_chunk_ref(record))
            elif isinstance(record, MetadataIndex):
                summary.metadata[record.name] = record
            elif isinstance(record, Statistics):
                summary.statistics = record
    except (McapError, struct.error, ValueError, EOFError) as exc:
        raise ContainerError(f"corrupt summary: {exc}", file=name, offset=at) from exc
    summary.chunks.sort(key=lambda c: (c.start_ns, c.offset))
    return summary


def _chunk_ref(index: ChunkIndex) -> ChunkRef:
    return ChunkRef(
        offset=index.chunk_start_offset,
        length=index.chunk_length,
        start_ns=index.message_start_time,
        end_ns=index.message_end_time,
        channel_ids=frozenset(index.message_index_offsets),
        compression=index.compression,
        uncompressed_size=index.uncompressed_size,
        index_length=_index_length(index),
    )


def _index_length(index: ChunkIndex) -> int:
    """The length of the message index records when they directly follow the chunk (as
    mcap's writer puts them); 0 (parse the whole chunk instead) when they lie elsewhere."""
    offsets = index.message_index_offsets.values()
    follows = index.chunk_start_offset + index.chunk_length
    if not offsets or min(offsets) != follows or index.message_index_length > MAX_CHUNK_BYTES:
        return 0
    return int(index.message_index_length)


def read_metadata(src: Source, summary: Summary, name: str) -> dict[str, str] | None:
    """The metadata record called ``name``, or ``None`` when the container has none."""
    index = summary.metadata.get(name)
    if index is None:
        return None
    if index.length > MAX_SUMMARY_BYTES or index.offset + index.length > summary.size:
        raise ContainerError("metadata index out of range", file=src.name, offset=index.offset)
    data = src.read_at(index.offset, index.length)
    try:
        if data[0] != Opcode.METADATA:
            raise ContainerError(
                "no metadata record at its index", file=src.name, offset=index.offset
            )
        record = Metadata.read(ReadDataStream(io.BytesIO(data[9:])))
    except (McapError, struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ContainerError(
            f"corrupt metadata: {exc}", file=src.name, offset=index.offset
        ) from exc
    return dict(record.metadata)


def read_chunk(src: Source, ref: ChunkRef) -> LoadedChunk:
    """Read one chunk and its message index in a single read, check the chunk's CRC, and
    return it ready to hand out messages by channel and time."""
    _check_size(src, ref)
    return parse_chunk(src.name, ref, src.read_at(ref.offset, ref.length + ref.index_length))


def read_chunks(src: Source, refs: list[ChunkRef]) -> dict[int, LoadedChunk]:
    """Read chunks lying close together (sorted by offset; see :func:`close_runs`) in one
    read, from the first one's start to the last one's message index, and parse each."""
    for ref in refs:
        _check_size(src, ref)
    base = refs[0].offset
    data = src.read_at(base, refs[-1].offset + refs[-1].length + refs[-1].index_length - base)
    out = {}
    for ref in refs:
        at = ref.offset - base
        out[ref.offset] = parse_chunk(src.name, ref, data[at : at + ref.length + ref.index_length])
    return out


#: Bytes between two chunks that one read takes along rather than making two reads.
MAX_GAP_BYTES = 256 * 1024


def close_runs(refs: list[ChunkRef]) -> list[list[ChunkRef]]:
    """``refs`` by offset, in runs one read each: a chunk joins the run before it when at most
    ``MAX_GAP_BYTES`` lie between them and the run stays within ``MAX_CHUNK_BYTES``."""
    runs: list[list[ChunkRef]] = []
    for ref in sorted(refs, key=lambda r: r.offset):
        if runs:
            first, last = runs[-1][0], runs[-1][-1]
            gap = ref.offset - (last.offset + last.length + last.index_length)
            size = ref.offset + ref.length + ref.index_length - first.offset
            if 0 <= gap <= MAX_GAP_BYTES and size <= MAX_CHUNK_BYTES:
                runs[-1].append(ref)
                continue
        runs.append([ref])
    return runs


def _check_size(src: Source, ref: ChunkRef) -> None:
    if ref.length > MAX_CHUNK_BYTES or ref.uncompressed_size > MAX_CHUNK_BYTES:
        raise ContainerError("chunk too large", file=src.name, offset=ref.offset)


def parse_chunk(name: str, ref: ChunkRef, data: bytes) -> LoadedChunk:
    """Check and parse the bytes of the chunk at ``ref`` (with its message index records)."""
    try:
        if data[0] != Opcode.CHUNK:
            raise ContainerError("no chunk at its index", file=name, offset=ref.offset)
        chunk = Chunk.read(ReadDataStream(io.BytesIO(data[9 : ref.length])))
        raw = decompress(chunk)
        if chunk.uncompressed_crc and zlib.crc32(raw) != chunk.uncompressed_crc:
            raise ContainerError("chunk CRC mismatch", file=name, offset=ref.offset)
        index = _read_indexes(data[ref.length :], len(raw)) if ref.index_length else None
        if index is None or not ref.channel_ids <= index.keys():
            index = _scan_records(raw)
        return LoadedChunk(raw, index, name, ref.offset)
    except ContainerError:
        raise
    except Exception as exc:  # zstd, lz4 and struct each raise their own types on bad bytes
        raise ContainerError(f"corrupt chunk: {exc}", file=name, offset=ref.offset) from exc


#: One channel's messages in a chunk, sorted by log time: log times (ns) and the offsets of
#: their records in the decompressed chunk.
ChannelIndex = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


class LoadedChunk:
    """A chunk's decompressed, CRC-checked records and each channel's message index."""

    def __init__(self, raw: bytes, index: dict[int, ChannelIndex], name: str, offset: int):
        self._raw, self._index, self._name, self._offset = raw, index, name, offset
        # Records parsed so far, by offset: a chunk kept for the next sample (consecutive
        # anchors) hands out most of the same records again.
        self._parsed: dict[int, Message] = {}

    def messages(self, channel: int, lo: int | None = None, hi: int | None = None) -> list[Message]:
        """Messages of ``channel``, by log time: all of them, or those in ``[lo, hi]`` plus
        the one just before ``lo`` and the one just after ``hi`` (the neighbours a resampling
        of the range needs), parsing only those records."""
        entry = self._index.get(channel)
        if entry is None:
            return []
        times, offsets = entry
        first = 0 if lo is None else max(0, int(np.searchsorted(times, lo, "left")) - 1)
        last = len(times) if hi is None else int(np.searchsorted(times, hi, "right")) + 1
        try:
            return [self._message(int(at), channel) for at in offsets[first:last]]
        except (ValueError, struct.error) as exc:
            raise ContainerError(
                f"corrupt chunk: {exc}", file=self._name, offset=self._offset
            ) from exc

    def _message(self, at: int, channel: int) -> Message:
        found = self._parsed.get(at)
        if found is None or found.channel_id != channel:
            found = self._parsed[at] = self._parse(at, channel)
        return found

    def _parse(self, at: int, channel: int) -> Message:
        raw = self._raw
        if raw[at] != _OPCODE_MESSAGE:
            raise ValueError(f"no message record at {at}")
        _, length, found, sequence, log_time, publish_time = _MESSAGE.unpack_from(raw, at)
        start, end = at + _MESSAGE.size, at + _RECORD.size + length
        if found != channel or end > len(raw) or start > end:
            raise ValueError(f"message index entry {at} does not match its record")
        return Message(channel, log_time, raw[start:end], publish_time, sequence)


def _read_indexes(data: bytes, chunk_size: int) -> dict[int, ChannelIndex] | None:
    """The message index records in ``data`` by channel (``None`` when there are none)."""
    out: dict[int, ChannelIndex] = {}
    pos = 0
    while pos < len(data):
        opcode, length = _RECORD.unpack_from(data, pos)
        body, pos = pos + _RECORD.size, pos + _RECORD.size + length
        if pos > len(data):
            raise ValueError(f"message index of {length} bytes overruns the read")
        if opcode != Opcode.MESSAGE_INDEX:
            continue
        channel, size = _INDEX_HEAD.unpack_from(data, body)
        if size % 16 or body + _INDEX_HEAD.size + size > pos:
            raise ValueError(f"message index of channel {channel} is malformed")
        pairs = np.frombuffer(data, "<u8", size // 8, body + _INDEX_HEAD.size).reshape(-1, 2)
        if pairs.size and (pairs.max() >= 2**63 or pairs[:, 1].max() >= chunk_size):
            raise ValueError(f"message index of channel {channel} points outside the chunk")
        out[channel] = _by_time(pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64))
    return out or None


def _scan_records(raw: bytes) -> dict[int, ChannelIndex]:
    """Each channel's message index, built by walking every record of the chunk (for a chunk
    whose index is missing or incomplete)."""
    found: dict[int, tuple[list[int], list[int]]] = {}
    pos, end = 0, len(raw)
    while pos < end:
        opcode, length = _RECORD.unpack_from(raw, pos)
        if opcode == _OPCODE_MESSAGE:
            _, _, channel, _, log_time, _ = _MESSAGE.unpack_from(raw, pos)
            times, offsets = found.setdefault(channel, ([], []))
            times.append(log_time)
            offsets.append(pos)
        pos += _RECORD.size + length
        if pos > end:
            raise ValueError(f"record of {length} bytes overruns the chunk")
    return {
        channel: _by_time(np.array(t, dtype=np.int64), np.array(o, dtype=np.int64))
        for channel, (t, o) in found.items()
    }


def _by_time(times: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> ChannelIndex:
    """Entries sorted by log time, ties kept in file order."""
    if len(times) > 1 and bool((np.diff(times) < 0).any()):
        order = np.argsort(times, kind="stable")
        return times[order], offsets[order]
    return times, offsets


def decompress(chunk: Chunk) -> bytes:
    """The uncompressed records of ``chunk`` (CRC not checked here)."""
    stream, length = get_chunk_data_stream(chunk, validate_crc=False)
    return stream.read(length)


_RECORD = struct.Struct("<BQ")
#: A message record's opcode and length, then channel, sequence, log and publish time.
_MESSAGE = struct.Struct("<BQHIQQ")
_OPCODE_MESSAGE = int(Opcode.MESSAGE)
#: A message index record's channel and the byte length of its (log time, offset) pairs.
_INDEX_HEAD = struct.Struct("<HI")
