"""Chunk layouts: which messages share a chunk.

``grouped`` is Quarry's layout (DESIGN.md, "Episode container"): topics split into groups by
read pattern (``cameras``; ``state`` holding joint positions, velocities, gripper and
actions), written time-major in windows of W seconds, one chunk per group per window. The
other two exist for the container benchmark only: ``per_topic`` writes each topic's window as
its own chunk, and ``interleaved`` is mcap's default writer (all topics interleaved by time,
chunks closed at 1 MiB).

With a context of C seconds, the chunk of a window that holds vector topics (state and
actions) also carries copies of those topics' messages from the C seconds before and after
the window, on context channels of their own (``/quarry/context`` + the topic, so other MCAP
tools show them as separate topics, never as duplicates). A sample's state history and action
horizon then come from one chunk even when they cross the window's edge. The copies keep
their sequence numbers. C is the same for every topic and both sides, which is what lets a
reader trust a chunk's time span: every message of a vector topic inside the span of a chunk
holding that topic is in the chunk, as itself or as a copy.

With window arrays (the writer's default), the chunk of a window instead carries, for each
vector topic, one message on the topic's window channel (``/quarry/window`` + the topic,
encoding ``quarry.vectors.v1``, see ``episodes.messages``) at the window's start time,
holding as one array every sample of the topic from C seconds before the window to C seconds
after it: a sample's state history and action horizon parse as one array per topic instead
of one message per step. The per-step messages stay, so other MCAP tools read every topic as
before; the context copies are not written (the arrays hold the context).
"""

from __future__ import annotations

import bisect
import enum
from collections import defaultdict
from dataclasses import dataclass, replace

CAMERA_GROUP = "cameras"
STATE_GROUP = "state"
#: Prefix of the context channel's topic that carries copies of a vector topic's messages.
CONTEXT_PREFIX = "/quarry/context"
#: Prefix of the window channel's topic that carries a vector topic's window arrays.
WINDOW_PREFIX = "/quarry/window"
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


def context_topic(topic: str) -> str:
    """The topic of the channel carrying context copies of ``topic``."""
    return CONTEXT_PREFIX + topic


def window_topic(topic: str) -> str:
    """The topic of the channel carrying the window arrays of ``topic``."""
    return WINDOW_PREFIX + topic


def plan_chunks(
    messages: list[Pending],
    layout: Layout,
    start_ns: int,
    window_ns: int,
    topics: list[str],
    context_ns: int = 0,
) -> list[list[Pending]]:
    """Cut messages into chunks, in file order; each inner list is written then flushed.

    For ``interleaved`` the single list is handed to mcap's size-based chunking instead.
    ``topics`` fixes the order of per-topic chunks inside a window (a topic's window arrays
    go into its own chunk). With ``context_ns``, each
    chunk holding a ``state``-group topic gets copies (on the topic's context channel) of
    that topic's messages up to ``context_ns`` before and after its window.
    """
    ordered = sorted(messages, key=lambda m: m.time_ns)
    if layout is Layout.INTERLEAVED:
        return [ordered]
    buckets: dict[tuple[int, int], list[Pending]] = defaultdict(list)
    rank = {topic: i for i, topic in enumerate(topics)}
    rank.update({window_topic(topic): i for i, topic in enumerate(topics)})
    for message in ordered:
        window = (message.time_ns - start_ns) // window_ns
        buckets[_key(message, window, layout, rank)].append(message)
    if context_ns > 0:
        _add_context(buckets, ordered, layout, rank, start_ns, window_ns, context_ns)
    return [buckets[key] for key in sorted(buckets)]


def _key(message: Pending, window: int, layout: Layout, rank: dict[str, int]) -> tuple[int, int]:
    if layout is Layout.GROUPED:
        return (window, GROUPS.index(message.group))
    return (window, rank[message.topic])


def _add_context(
    buckets: dict[tuple[int, int], list[Pending]],
    ordered: list[Pending],
    layout: Layout,
    rank: dict[str, int],
    start_ns: int,
    window_ns: int,
    context_ns: int,
) -> None:
    """Add to each chunk of vector topics the context copies its window needs."""
    by_topic: dict[str, list[Pending]] = defaultdict(list)
    for message in ordered:
        if message.group == STATE_GROUP and not message.topic.startswith(WINDOW_PREFIX):
            by_topic[message.topic].append(message)
    times = {topic: [m.time_ns for m in stream] for topic, stream in by_topic.items()}
    for key, chunk in buckets.items():
        if chunk[0].group != STATE_GROUP:
            continue
        lo = start_ns + key[0] * window_ns
        hi = lo + window_ns
        for topic, stream in by_topic.items():
            if _key(stream[0], key[0], layout, rank) != key:
                continue  # per-topic: another topic's chunk
            at = times[topic]
            before = stream[bisect.bisect_left(at, lo - context_ns) : bisect.bisect_left(at, lo)]
            after = stream[bisect.bisect_left(at, hi) : bisect.bisect_left(at, hi + context_ns)]
            chunk.extend(replace(m, topic=context_topic(topic)) for m in before + after)
        chunk.sort(key=lambda m: m.time_ns)
