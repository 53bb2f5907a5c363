"""Describe any MCAP recording as ``mcap info`` does, and propose the mapping ingest needs.

``survey`` reads the whole file front to back (:mod:`episodes._scan`, keeping one payload per
channel), so it also describes a file without a summary or one cut off at the tail (then
``damage`` gives the byte offset of the cut). It reports the header's profile and library,
message counts and the log-time range (integer ns), each channel's topic, message encoding,
schema and its encoding, message count and rate (``(count - 1) / (last - first log time)``,
Hz), the chunks by compression with their sizes in bytes and whether their time ranges
overlap, and whether the file is indexed (a summary section with chunk indexes, message
index records, statistics). Its ``mapping`` entry is :func:`episodes.suggest.suggest_mapping`'s
proposal for ``quarry ingest mcap``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ._scan import ChunkInfo, Recording, scan_file
from .info import METADATA_NAME
from .suggest import suggest_mapping


def survey(path: Path) -> dict[str, Any]:
    """Describe the MCAP file at ``path`` (module docstring); JSON-ready."""
    rec = scan_file(path, salvage=True, payloads=False)
    times = [m.log_time for msgs in rec.messages.values() for m in (msgs[0], msgs[-1])]
    mapping, notes, roles = suggest_mapping(rec)
    return {
        "uri": str(path),
        "size_bytes": rec.size,
        "format": "quarry" if METADATA_NAME in rec.metadata else "foreign",
        "profile": rec.profile,
        "library": rec.library,
        "messages": sum(len(m) for m in rec.messages.values()),
        "start_ns": min(times) if times else None,
        "end_ns": max(times) if times else None,
        "topics": [_topic(rec, cid, roles.get(c.topic, [])) for cid, c in rec.channels.items()],
        "chunks": _chunks(rec.chunks),
        "indexed": _indexed(rec),
        "attachments": rec.records["ATTACHMENT"],
        "metadata": rec.records["METADATA"],
        "damage": (
            {"offset": rec.damage.offset, "reason": rec.damage.reason} if rec.damage else None
        ),
        "mapping": mapping,
        "mapping_notes": notes,
    }


def _topic(rec: Recording, channel_id: int, roles: list[str]) -> dict[str, Any]:
    channel = rec.channels[channel_id]
    schema = rec.schemas.get(channel.schema_id)
    msgs = rec.messages.get(channel_id, [])
    first, last = (msgs[0].log_time, msgs[-1].log_time) if msgs else (None, None)
    rate = None
    if first is not None and last is not None and last > first:
        rate = round((len(msgs) - 1) * 1e9 / (last - first), 3)
    return {
        "channel_id": channel_id,
        "topic": channel.topic,
        "message_encoding": channel.message_encoding,
        "schema": schema.name if schema else None,
        "schema_encoding": schema.encoding if schema else None,
        "messages": len(msgs),
        "rate_hz": rate,
        "start_ns": first,
        "end_ns": last,
        "roles": roles,
    }


def _chunks(chunks: list[ChunkInfo]) -> dict[str, Any]:
    by: dict[str, Counter[str]] = {}
    for chunk in chunks:
        counts = by.setdefault(chunk.compression, Counter())
        counts["chunks"] += 1
        counts["compressed_bytes"] += chunk.compressed_size
        counts["uncompressed_bytes"] += chunk.uncompressed_size
    return {
        "count": len(chunks),
        "compression": {name: dict(counts) for name, counts in sorted(by.items())},
        "max_compressed_bytes": max((c.compressed_size for c in chunks), default=0),
        "max_uncompressed_bytes": max((c.uncompressed_size for c in chunks), default=0),
        "overlaps": _overlaps(chunks),
    }


def _overlaps(chunks: list[ChunkInfo]) -> bool:
    """Whether a chunk starts before an earlier-starting one ends (log time)."""
    furthest: int | None = None
    for start, end in sorted((c.start_ns, c.end_ns) for c in chunks):
        if furthest is not None and start < furthest:
            return True
        furthest = end if furthest is None else max(furthest, end)
    return False


def _indexed(rec: Recording) -> dict[str, Any]:
    """What of the file's own index is there: the summary, chunk and message indexes."""
    chunk_indexes = rec.records["CHUNK_INDEX"]
    return {
        "indexed": bool(rec.summary_start) and chunk_indexes == len(rec.chunks),
        "summary": bool(rec.summary_start),
        "chunk_indexes": chunk_indexes,
        "message_indexes": rec.records["MESSAGE_INDEX"],
        "statistics": rec.records["STATISTICS"] > 0,
        "summary_offsets": rec.records["SUMMARY_OFFSET"],
    }
