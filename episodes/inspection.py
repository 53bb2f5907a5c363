"""``quarry episodes inspect``: what a container holds, as a JSON-ready dict."""

from __future__ import annotations

import os
from typing import IO, Any

from .quality import check_episode
from .reader import EpisodeReader


def inspect(source: str | os.PathLike[str] | IO[bytes], *, quality: bool = True) -> dict[str, Any]:
    """Describe a container: episode, stamps, layout, topics with rates and groups, chunks,
    and (when ``quality``) the QC flags computed from its data. Times are integer ns."""
    with EpisodeReader(source) as reader:
        info = reader.info
        out: dict[str, Any] = {
            "uri": info.name,
            "size_bytes": info.size_bytes,
            "episode": info.episode,
            "stamps": {
                "schema_version": info.stamps.schema_version,
                "pipeline_version": info.stamps.pipeline_version,
                "robot_sw_version": info.stamps.robot_sw_version,
            },
            "layout": {
                "name": info.layout,
                "window_ns": info.window_ns,
                "context_ns": info.context_ns,
                "window_arrays": any(t.window_channel_id is not None for t in info.topics.values()),
                "video": info.video,
            },
            "groups": info.groups,
            "topics": [
                {
                    "topic": t.topic,
                    "kind": t.kind,
                    "group": t.group,
                    "rate_hz": t.rate_hz,
                    "messages": t.message_count,
                    "schema": t.schema,
                }
                for t in info.topics.values()
            ],
            "chunks": [
                {
                    "offset": c.offset,
                    "length": c.length,
                    "start_ns": c.start_ns,
                    "end_ns": c.end_ns,
                    "compression": c.compression,
                    "topics": sorted(
                        t.topic for t in info.topics.values() if t.channel_id in c.channel_ids
                    ),
                }
                for c in info.chunks
            ],
        }
        if quality:
            qc = check_episode(reader)
            out["quality"] = {"flags": qc.flag_names, "report": qc.report}
    return out
