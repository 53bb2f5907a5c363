"""``quarry episodes inspect`` of a foreign recording: its description in lines like
``mcap info``'s, and the suggested mapping file written out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from episodes.suggest import mapping_text
from quarry.errors import BadInputError


def write_mapping(described: dict[str, Any], out: Path) -> None:
    """Write the suggested mapping to ``out`` (TOML for ``.toml``, else JSON)."""
    text = mapping_text(described["mapping"], described["mapping_notes"], out.suffix == ".toml")
    try:
        out.write_text(text)
    except OSError as error:
        raise BadInputError(f"cannot write the mapping to {out}: {error}") from None


def describe_recording(info: dict[str, Any]) -> str:
    """A few lines a person can read, in the order ``mcap info`` prints them."""
    start, end = info["start_ns"], info["end_ns"]
    seconds = (end - start) / 1e9 if start is not None and end is not None else 0.0
    lines = [
        f"file:        {info['uri']} ({_bytes(info['size_bytes'])})",
        f"library:     {info['library'] or 'unknown'}",
        f"profile:     {info['profile'] or 'unknown'}",
        f"messages:    {info['messages']}",
        f"duration:    {seconds:.3f} s",
        f"start:       {start if start is not None else '-'} ns",
        f"end:         {end if end is not None else '-'} ns",
    ]
    lines += _chunk_lines(info["chunks"], seconds)
    lines.append(f"indexed:     {_index_line(info['indexed'])}")
    lines.append("channels:")
    width = max((len(t["topic"]) for t in info["topics"]), default=0)
    for topic in info["topics"]:
        rate = f"({topic['rate_hz']:.2f} Hz)" if topic["rate_hz"] else ""
        roles = f"  -> {', '.join(topic['roles'])}" if topic["roles"] else ""
        lines.append(
            f"\t({topic['channel_id']}) {topic['topic']:<{width}}  {topic['messages']:>6} msgs "
            f"{rate:<12} : {topic['schema'] or '<no schema>'} [{topic['schema_encoding'] or '-'}]"
            f" {topic['message_encoding']}{roles}"
        )
    lines.append(f"attachments: {info['attachments']}")
    lines.append(f"metadata:    {info['metadata']}")
    if info["damage"]:
        damage = info["damage"]
        lines.append(f"damage:      cut off at byte {damage['offset']}: {damage['reason']}")
    lines += [f"mapping:     {note}" for note in info["mapping_notes"]]
    return "\n".join(lines)


def _chunk_lines(chunks: dict[str, Any], seconds: float) -> list[str]:
    if not chunks["count"]:
        return ["chunks:      none (messages written unchunked)"]
    lines = ["compression:"]
    for name, c in chunks["compression"].items():
        saved = (
            100 * (1 - c["compressed_bytes"] / c["uncompressed_bytes"])
            if c["uncompressed_bytes"]
            else 0
        )
        rate = f" [{_bytes(c['compressed_bytes'] / seconds)}/s]" if seconds > 0 else ""
        lines.append(
            f"\t{name}: [{c['chunks']}/{chunks['count']} chunks] "
            f"[{_bytes(c['uncompressed_bytes'])}/{_bytes(c['compressed_bytes'])} ({saved:.2f}%)]"
            + rate
        )
    lines += [
        "chunks:",
        f"\tmax uncompressed size: {_bytes(chunks['max_uncompressed_bytes'])}",
        f"\tmax compressed size: {_bytes(chunks['max_compressed_bytes'])}",
        f"\toverlaps: {'yes' if chunks['overlaps'] else 'no'}",
    ]
    return lines


def _index_line(index: dict[str, Any]) -> str:
    if not index["summary"]:
        return "no (no summary section: read front to back)"
    parts = [
        f"{index['chunk_indexes']} chunk indexes",
        f"{index['message_indexes']} message indexes",
    ]
    parts.append("statistics" if index["statistics"] else "no statistics")
    return f"{'yes' if index['indexed'] else 'partly'} ({', '.join(parts)})"


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.2f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.2f} GiB"
