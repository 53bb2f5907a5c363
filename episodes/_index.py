"""Low-level container access: the summary, the metadata record and whole chunks.

Reads go through :class:`Source`, one ``read`` per record, so a remote file object (an fsspec
file opened without read-ahead) costs one request per summary, metadata record or chunk.
Sizes read from the file are bounded before anything is allocated.
"""

from __future__ import annotations

import io
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import IO

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
    )


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


def read_chunk(src: Source, ref: ChunkRef) -> dict[int, list[Message]]:
    """Read one chunk in a single read, check its CRC, and return its messages by channel id,
    each channel's in file order."""
    if ref.length > MAX_CHUNK_BYTES or ref.uncompressed_size > MAX_CHUNK_BYTES:
        raise ContainerError("chunk too large", file=src.name, offset=ref.offset)
    data = src.read_at(ref.offset, ref.length)
    try:
        if data[0] != Opcode.CHUNK:
            raise ContainerError("no chunk at its index", file=src.name, offset=ref.offset)
        chunk = Chunk.read(ReadDataStream(io.BytesIO(data[9:])))
        raw = decompress(chunk)
        if chunk.uncompressed_crc and zlib.crc32(raw) != chunk.uncompressed_crc:
            raise ContainerError("chunk CRC mismatch", file=src.name, offset=ref.offset)
        return _messages(raw)
    except ContainerError:
        raise
    except Exception as exc:  # zstd, lz4 and struct each raise their own types on bad bytes
        raise ContainerError(f"corrupt chunk: {exc}", file=src.name, offset=ref.offset) from exc


def decompress(chunk: Chunk) -> bytes:
    """The uncompressed records of ``chunk`` (CRC not checked here)."""
    stream, length = get_chunk_data_stream(chunk, validate_crc=False)
    return stream.read(length)


_RECORD = struct.Struct("<BQ")
#: A message record's opcode and length, then channel, sequence, log and publish time.
_MESSAGE = struct.Struct("<BQHIQQ")
_OPCODE_MESSAGE = int(Opcode.MESSAGE)


def _messages(raw: bytes) -> dict[int, list[Message]]:
    """Message records of a decompressed chunk by channel (other records skipped).

    This loop runs once per message of every chunk read, so it unpacks a message record's
    headers in one call, slices its payload straight out of ``raw`` and files it under its
    channel in the same pass.
    """
    out: dict[int, list[Message]] = {}
    pos, end = 0, len(raw)
    while pos < end:
        if raw[pos] == _OPCODE_MESSAGE and pos + _MESSAGE.size <= end:
            _, length, channel, sequence, log_time, publish_time = _MESSAGE.unpack_from(raw, pos)
            start, pos = pos + _MESSAGE.size, pos + _RECORD.size + length
            if pos > end or start > pos:
                raise ValueError(f"record of {length} bytes overruns the chunk")
            message = Message(channel, log_time, raw[start:pos], publish_time, sequence)
            try:
                out[channel].append(message)
            except KeyError:
                out[channel] = [message]
            continue
        _, length = _RECORD.unpack_from(raw, pos)
        pos += _RECORD.size + length
        if pos > end:
            raise ValueError(f"record of {length} bytes overruns the chunk")
    return out
