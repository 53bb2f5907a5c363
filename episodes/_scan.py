"""Scan a whole MCAP file written by another tool, record by record, keeping byte offsets.

Foreign recordings may use any chunking (or none) and may lack a summary, so they are read
front to back instead of through the chunk index. Every chunk's CRC is checked. Errors name
the file and the byte offset of the record at fault (for a message: the chunk holding it, or
the message record itself in an unchunked file).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Message, Metadata, Schema

from ._index import MAGIC, MAX_CHUNK_BYTES, decompress
from .errors import ContainerError, SourceError

_RECORD = struct.Struct("<BQ")


@dataclass(frozen=True)
class RawMessage:
    """One message as recorded: log time (integer ns), sequence, payload, and the byte offset
    of the record that holds it (its chunk, or the message record in an unchunked file)."""

    log_time: int
    sequence: int
    data: bytes
    offset: int


@dataclass
class Recording:
    """Everything in a foreign MCAP file's data section, grouped by channel id.

    ``channel_offsets`` gives the byte offset of the record that defined each channel.
    """

    name: str
    size: int
    profile: str = ""
    library: str = ""
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    channel_offsets: dict[int, int] = field(default_factory=dict)
    messages: dict[int, list[RawMessage]] = field(default_factory=dict)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)

    def topic_channel(self, topic: str) -> Channel | None:
        """The channel of ``topic`` (the first one, if a tool registered it twice)."""
        return next((c for c in self.channels.values() if c.topic == topic), None)


def scan_file(path: Path) -> Recording:
    """Read every record of the MCAP file at ``path`` (see the module docstring)."""
    try:
        with path.open("rb") as stream:
            return _scan(stream, str(path), path.stat().st_size)
    except FileNotFoundError as exc:
        raise SourceError(f"no such recording: {exc}", file=str(path), retryable=False) from exc
    except OSError as exc:
        raise SourceError(f"cannot read recording: {exc}", file=str(path)) from exc


def _scan(stream: IO[bytes], name: str, size: int) -> Recording:
    if stream.read(len(MAGIC)) != MAGIC:
        raise ContainerError("not an MCAP file (no magic at the start)", file=name, offset=0)
    rec = Recording(name=name, size=size)
    pos = len(MAGIC)
    for opcode, body, at in _records(stream, name, size, pos):
        if opcode == Opcode.DATA_END:
            _check_tail(stream, name, size)
            return rec
        try:
            _take(rec, opcode, body, at)
        except ContainerError:
            raise
        except Exception as exc:  # mcap, zstd, lz4 and struct each raise their own types
            raise ContainerError(f"corrupt record: {exc}", file=name, offset=at) from exc
    raise ContainerError(
        "recording truncated: it ends before its data-end record", file=name, offset=size
    )


def _records(stream: IO[bytes], name: str, size: int, pos: int) -> Iterator[tuple[int, bytes, int]]:
    """Top-level records as ``(opcode, body, offset)`` until the end of the file."""
    while pos < size:
        head = stream.read(_RECORD.size)
        if len(head) < _RECORD.size:
            raise ContainerError("recording truncated inside a record", file=name, offset=pos)
        opcode, length = _RECORD.unpack(head)
        if pos + _RECORD.size + length > size:
            raise ContainerError(
                f"recording truncated: a record of {length} bytes runs past the end",
                file=name,
                offset=pos,
            )
        if length > MAX_CHUNK_BYTES:
            raise ContainerError(f"record of {length} bytes is too large", file=name, offset=pos)
        body = stream.read(length)
        yield opcode, body, pos
        pos += _RECORD.size + length


def _check_tail(stream: IO[bytes], name: str, size: int) -> None:
    stream.seek(size - len(MAGIC))
    if stream.read(len(MAGIC)) != MAGIC:
        raise ContainerError(
            "recording truncated: no MCAP magic at the end", file=name, offset=size
        )


def _take(rec: Recording, opcode: int, body: bytes, at: int) -> None:
    data = ReadDataStream(io.BytesIO(body))
    if opcode == Opcode.HEADER:
        rec.profile, rec.library = data.read_prefixed_string(), data.read_prefixed_string()
    elif opcode == Opcode.CHUNK:
        chunk = Chunk.read(data)
        if chunk.uncompressed_size > MAX_CHUNK_BYTES:
            raise ContainerError("chunk too large", file=rec.name, offset=at)
        raw = decompress(chunk)
        if chunk.uncompressed_crc and zlib.crc32(raw) != chunk.uncompressed_crc:
            raise ContainerError("chunk CRC mismatch", file=rec.name, offset=at)
        for inner, inner_body in _inner_records(raw):
            _take_inner(rec, inner, inner_body, at)
    elif opcode == Opcode.METADATA:
        record = Metadata.read(data)
        rec.metadata[record.name] = dict(record.metadata)
    else:
        _take_inner(rec, opcode, body, at)


def _take_inner(rec: Recording, opcode: int, body: bytes, at: int) -> None:
    data = ReadDataStream(io.BytesIO(body))
    if opcode == Opcode.SCHEMA:
        schema = Schema.read(data)
        rec.schemas.setdefault(schema.id, schema)
    elif opcode == Opcode.CHANNEL:
        channel = Channel.read(data)
        if channel.id not in rec.channels:
            rec.channels[channel.id] = channel
            rec.channel_offsets[channel.id] = at
    elif opcode == Opcode.MESSAGE:
        message = Message.read(data, len(body))
        if message.channel_id not in rec.channels:
            raise ContainerError(
                f"message on unknown channel {message.channel_id}", file=rec.name, offset=at
            )
        rec.messages.setdefault(message.channel_id, []).append(
            RawMessage(message.log_time, message.sequence, message.data, at)
        )


def _inner_records(raw: bytes) -> Iterator[tuple[int, bytes]]:
    pos, end = 0, len(raw)
    while pos < end:
        opcode, length = _RECORD.unpack_from(raw, pos)
        pos += _RECORD.size
        if pos + length > end:
            raise McapError(f"record of {length} bytes overruns its chunk")
        yield opcode, raw[pos : pos + length]
        pos += length
