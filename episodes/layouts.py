"""Chunk layouts: which messages share a chunk.

``grouped`` is Quarry's layout (DESIGN.md, "Episode container"): topics split into groups by
read pattern (``cameras``; ``state`` holding joint positions, velocities, gripper and
actions), written time-major in windows of W seconds, one chunk per group per window. The
other two exist for the container benchmark only: ``per_topic`` writes each topic's window as
its own chunk, and ``interleaved`` is mcap's default writer (all topics interleaved by time,
chunks closed at 1 MiB).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass

CAMERA_GROUP = "cameras"
STATE_GROUP = "state"
GROUPS = (CAMERA_GROUP, STATE_GROUP)
#: Chunk size of mcap's default writer, bytes.
DEFAULT_CHUNK_BYTES = 1024 * 1024


class Layout(enum.StrEnum):
    """How messages are cut into chunks."""

    GROUPED = "grouped"
    PER_TOPIC = "per_topic"
    INTERLEAVED = "interleaved"


@dataclass(frozen=True)
class Pending:
    """A message waiting to be written (log time in integer nanoseconds)."""

    time_ns: int
    topic: str
    group: str
    sequence: int
    data: bytes


def plan_chunks(
    messages: list[Pending], layout: Layout, start_ns: int, window_ns: int, topics: list[str]
) -> list[list[Pending]]:
    """Cut messages into chunks, in file order; each inner list is written then flushed.

    For ``interleaved`` the single list is handed to mcap's size-based chunking instead.
    ``topics`` fixes the order of per-topic chunks inside a window.
    """
    ordered = sorted(messages, key=lambda m: m.time_ns)
    if layout is Layout.INTERLEAVED:
        return [ordered]
    buckets: dict[tuple[int, int], list[Pending]] = defaultdict(list)
    rank = {topic: i for i, topic in enumerate(topics)}
    for message in ordered:
        window = (message.time_ns - start_ns) // window_ns
        if layout is Layout.GROUPED:
            key = (window, GROUPS.index(message.group))
        else:
            key = (window, rank[message.topic])
        buckets[key].append(message)
    return [buckets[key] for key in sorted(buckets)]
