"""Scan a whole MCAP file written by another tool, record by record, keeping byte offsets.

Foreign recordings may use any chunking (or none) and may lack a summary, so they are read
front to back instead of through the chunk index. Every chunk's CRC is checked. Errors name
the file and the byte offset of the record at fault (for a message: the chunk holding it, or
the message record itself in an unchunked file).

A file cut off at the tail (no data-end record, a record running past the end, or a summary
section that stops short) is refused unless ``salvage`` is on. Salvage works as
``mcap recover`` does: every top-level record that is whole before the cut is kept (a chunk
only when all of it is there), the first incomplete one and everything after it are dropped,
and :attr:`Recording.damage` gives the byte offset where the file stops being whole. Damage
other than a cut (a CRC mismatch, a corrupt record) is refused even then.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections import Counter
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
_FOOTER = struct.Struct("<QQI")  # summary start, summary offset start, summary CRC
#: Said by every refusal of a cut-off file, so the user learns the way out.
SALVAGE_HINT = "--salvage ingests the whole records before it"


class _TruncatedError(Exception):
    """The file ends inside a record (internal: salvage keeps what precedes ``offset``)."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason, self.offset = reason, offset


@dataclass(frozen=True)
class Damage:
    """Where a recording stops being whole: the byte offset of the first incomplete record
    (or the file's size when it ends between records) and why."""

    offset: int
    reason: str


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk record: byte offset and record length, compression, sizes in bytes, the log
    time range of its messages (integer ns) and how many messages it holds."""

    offset: int
    length: int
    compression: str
    compressed_size: int
    uncompressed_size: int
    start_ns: int
    end_ns: int
    messages: int


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
    #: every chunk record, in file order.
    chunks: list[ChunkInfo] = field(default_factory=list)
    #: top-level records seen, by opcode name (``CHUNK_INDEX``, ``STATISTICS``, ...).
    records: Counter[str] = field(default_factory=Counter)
    #: byte offset of the summary section from the footer, ``0`` when there is none.
    summary_start: int = 0
    damage: Damage | None = None
    #: ``False``: only each channel's first payload is kept (enough to describe a file).
    payloads: bool = True

    def topic_channel(self, topic: str) -> Channel | None:
        """The channel of ``topic`` (the first one, if a tool registered it twice)."""
        return next((c for c in self.channels.values() if c.topic == topic), None)


def scan_file(path: Path, *, salvage: bool = False, payloads: bool = True) -> Recording:
    """Read every record of the MCAP file at ``path`` (see the module docstring); with
    ``salvage``, a cut-off file gives what precedes the cut and its :class:`Damage`."""
    try:
        with path.open("rb") as stream:
            rec = Recording(name=str(path), size=path.stat().st_size, payloads=payloads)
            return _scan(stream, rec, salvage)
    except FileNotFoundError as exc:
        raise SourceError(f"no such recording: {exc}", file=str(path), retryable=False) from exc
    except OSError as exc:
        raise SourceError(f"cannot read recording: {exc}", file=str(path)) from exc


def _scan(stream: IO[bytes], rec: Recording, salvage: bool) -> Recording:
    if stream.read(len(MAGIC)) != MAGIC:
        raise ContainerError("not an MCAP file (no magic at the start)", file=rec.name, offset=0)
    try:
        _scan_records(stream, rec)
    except ContainerError as exc:
        exc.file = exc.file or rec.name
        raise
    except _TruncatedError as cut:
        if not salvage:
            message = f"recording truncated: {cut.reason}; {SALVAGE_HINT}"
            raise ContainerError(message, file=rec.name, offset=cut.offset) from None
        rec.damage = Damage(cut.offset, cut.reason)
    return rec


def _scan_records(stream: IO[bytes], rec: Recording) -> None:
    records = _records(stream, rec.size, len(MAGIC))
    for opcode, body, at in records:
        rec.records[_opcode_name(opcode)] += 1
        if opcode == Opcode.DATA_END:
            _scan_summary(stream, rec, records)
            return
        try:
            _take(rec, opcode, body, at)
        except ContainerError:
            raise
        except Exception as exc:  # mcap, zstd, lz4 and struct each raise their own types
            raise ContainerError(f"corrupt record: {exc}", file=rec.name, offset=at) from exc
    raise _TruncatedError("it ends before its data-end record", rec.size)


def _scan_summary(
    stream: IO[bytes], rec: Recording, records: Iterator[tuple[int, bytes, int]]
) -> None:
    """Count the summary section's records up to the footer, then check the closing magic.

    The data section is whole by then, so a cut here is reported at the file's end."""
    try:
        for opcode, body, at in records:
            rec.records[_opcode_name(opcode)] += 1
            if opcode == Opcode.FOOTER:
                if len(body) >= _FOOTER.size:
                    rec.summary_start = _FOOTER.unpack_from(body)[0]
                stream.seek(at + _RECORD.size + len(body))
                if stream.read(len(MAGIC)) != MAGIC:
                    raise _TruncatedError("no MCAP magic at the end", rec.size)
                return
    except _TruncatedError as cut:
        raise _TruncatedError(f"summary section cut short ({cut.reason})", rec.size) from None
    raise _TruncatedError("its summary section ends before the footer", rec.size)


def _opcode_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"0x{opcode:02x}"


def _records(stream: IO[bytes], size: int, pos: int) -> Iterator[tuple[int, bytes, int]]:
    """Top-level records as ``(opcode, body, offset)`` until the end of the file."""
    while pos < size:
        head = stream.read(_RECORD.size)
        if len(head) < _RECORD.size:
            raise _TruncatedError("it ends inside a record", pos)
        opcode, length = _RECORD.unpack(head)
        if pos + _RECORD.size + length > size:
            raise _TruncatedError(f"a record of {length} bytes runs past the end", pos)
        if length > MAX_CHUNK_BYTES:
            raise ContainerError(f"record of {length} bytes is too large", offset=pos)
        body = stream.read(length)
        yield opcode, body, pos
        pos += _RECORD.size + length


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
        before = sum(len(m) for m in rec.messages.values())
        for inner, inner_body in _inner_records(raw):
            _take_inner(rec, inner, inner_body, at)
        count = sum(len(m) for m in rec.messages.values()) - before
        rec.chunks.append(_chunk_info(chunk, at, _RECORD.size + len(body), count))
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
        kept = rec.messages.setdefault(message.channel_id, [])
        payload = message.data if rec.payloads or not kept else b""
        kept.append(RawMessage(message.log_time, message.sequence, payload, at))


def _chunk_info(chunk: Chunk, at: int, length: int, messages: int) -> ChunkInfo:
    return ChunkInfo(
        at,
        length,
        chunk.compression or "none",
        len(chunk.data),
        chunk.uncompressed_size,
        chunk.message_start_time,
        chunk.message_end_time,
        messages,
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
