"""What a container holds: topics, rates, groups, layout, stamps and chunks (from its summary)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mcap.records import Channel

from . import messages as msg
from ._index import ChunkRef, Summary
from .episode import CAMERA, STATE_KINDS, VECTOR_KINDS, Stamps
from .errors import ContainerError, SchemaError, TopicError

METADATA_NAME = "quarry.episode"
FORMAT = "quarry.episode/1"


@dataclass(frozen=True)
class TopicInfo:
    """One topic: its kind, group, nominal rate (Hz), channel and parsed schema."""

    topic: str
    kind: str
    group: str
    rate_hz: float
    channel_id: int
    schema: dict[str, Any]
    message_count: int | None = None
    #: the channel carrying this topic's context copies (see episodes.layouts), if any.
    context_channel_id: int | None = None
    #: the channel carrying this topic's window arrays (see episodes.layouts), if any.
    window_channel_id: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Dimension names of a vector topic (empty for cameras)."""
        return tuple(self.schema.get("names", ()))


@dataclass(frozen=True)
class ContainerInfo:
    """A container's description, read once when it is opened.

    Times are integer nanoseconds of log time; ``window_ns`` is the layout window W and
    ``context_ns`` the state and action context each window's chunk carries on either side.
    """

    name: str
    size_bytes: int
    episode: dict[str, Any]
    stamps: Stamps
    layout: str
    window_ns: int
    groups: dict[str, list[str]]
    video: dict[str, Any]
    topics: dict[str, TopicInfo]
    chunks: list[ChunkRef] = field(repr=False)
    context_ns: int = 0

    @property
    def start_ns(self) -> int:
        """First log time of the episode, integer nanoseconds."""
        return int(self.episode["start_ns"])

    @property
    def end_ns(self) -> int:
        """End of the episode's log time range (exclusive), integer nanoseconds."""
        return int(self.episode["end_ns"])

    @property
    def control_hz(self) -> float:
        """The episode's control (action) rate, Hz."""
        return float(self.episode["control_hz"])

    @property
    def cameras(self) -> list[TopicInfo]:
        """Camera topics, in the container's order."""
        return [t for t in self.topics.values() if t.kind == CAMERA]

    def vector(self, kind: str) -> TopicInfo | None:
        """The vector topic of ``kind``, if the container has one."""
        return next((t for t in self.topics.values() if t.kind == kind), None)

    def state_topics(self) -> list[TopicInfo]:
        """State topics present, in the fixed state order (positions, velocities, gripper)."""
        return [t for kind in STATE_KINDS if (t := self.vector(kind)) is not None]

    def chunks_with(
        self, topic: str, *, context: bool = False, window: bool = False
    ) -> list[ChunkRef]:
        """Chunks holding messages of ``topic`` (with ``context``, its context copies too;
        with ``window``, only those holding its window arrays), by start time."""
        info = self.topics[topic]
        channels = {info.channel_id}
        if window:
            channels = {info.window_channel_id} if info.window_channel_id is not None else set()
        if context and info.context_channel_id is not None:
            channels.add(info.context_channel_id)
        return [c for c in self.chunks if channels & c.channel_ids]


def parse_info(summary: Summary, meta: dict[str, str] | None, name: str) -> ContainerInfo:
    """Build and check a :class:`ContainerInfo` from the summary and the metadata record."""
    if meta is None or meta.get("format") != FORMAT:
        raise ContainerError(f"not a Quarry container (no {METADATA_NAME} metadata)", file=name)
    try:
        episode = json.loads(meta["episode"])
        stamps = json.loads(meta["stamps"])
        layout = json.loads(meta["layout"])
        table = json.loads(meta["topics"])
    except (KeyError, ValueError) as exc:
        raise ContainerError(f"corrupt {METADATA_NAME} metadata: {exc}", file=name) from exc
    by_topic = {c.topic: c for c in summary.channels.values()}
    counts = summary.statistics.channel_message_counts if summary.statistics else {}
    topics = {}
    for row in table:
        channel = by_topic.get(row["topic"])
        if channel is None:
            raise TopicError(
                "topic listed in metadata has no channel", file=name, topic=row["topic"]
            )
        schema = _check_channel(summary, channel.id, row["kind"], name, row["topic"])
        context = _context_channel(summary, layout, channel, name)
        window = _window_channel(summary, layout, channel, schema, name)
        topics[row["topic"]] = TopicInfo(
            row["topic"],
            row["kind"],
            row["group"],
            float(row["rate_hz"]),
            channel.id,
            schema,
            counts.get(channel.id),
            context,
            window,
        )
    return ContainerInfo(
        name=name,
        size_bytes=summary.size,
        episode=episode,
        stamps=Stamps(**stamps),
        layout=layout["layout"],
        window_ns=int(layout["window_ns"]),
        groups=layout["groups"],
        video=layout.get("video", {}),
        topics=topics,
        chunks=summary.chunks,
        context_ns=int(layout.get("context_ns", 0)),
    )


def _context_channel(
    summary: Summary, layout: dict[str, Any], of: Channel, name: str
) -> int | None:
    """The channel of the context copies of ``of``'s topic: named in the layout, with the
    same message encoding and schema."""
    wanted = layout.get("context_topics", {}).get(of.topic)
    if wanted is None:
        return None
    channel = next((c for c in summary.channels.values() if c.topic == wanted), None)
    if channel is None or not _same_format(summary, channel, of):
        raise TopicError(
            f"context topic {wanted!r} is missing or differs from its topic",
            file=name,
            topic=of.topic,
        )
    return channel.id


def _window_channel(
    summary: Summary, layout: dict[str, Any], of: Channel, schema: dict[str, Any], name: str
) -> int | None:
    """The channel of the window arrays of ``of``'s topic: named in the layout, encoded
    ``quarry.vectors.v1`` with the topic's dimension names."""
    wanted = layout.get("window_topics", {}).get(of.topic)
    if wanted is None:
        return None
    channel = next((c for c in summary.channels.values() if c.topic == wanted), None)
    found = summary.schemas.get(channel.schema_id) if channel is not None else None
    if (
        channel is None
        or found is None
        or channel.message_encoding != msg.WINDOW_ENCODING
        or found.name != msg.WINDOW_SCHEMA
    ):
        raise TopicError(
            f"window topic {wanted!r} is missing or not {msg.WINDOW_ENCODING}/{msg.WINDOW_SCHEMA}",
            file=name,
            topic=of.topic,
        )
    try:
        body = msg.parse_schema(found.data, "vector_window", topic=wanted)
    except SchemaError as exc:
        exc.file = name
        raise
    if body["names"] != schema.get("names"):
        raise SchemaError(
            f"window topic {wanted!r} names other dimensions than its topic",
            file=name,
            topic=of.topic,
        )
    return channel.id


def _same_format(summary: Summary, a: Channel, b: Channel) -> bool:
    schema_a, schema_b = summary.schemas.get(a.schema_id), summary.schemas.get(b.schema_id)
    return (
        a.message_encoding == b.message_encoding
        and schema_a is not None
        and schema_b is not None
        and (schema_a.name, schema_a.encoding, schema_a.data)
        == (schema_b.name, schema_b.encoding, schema_b.data)
    )


def _check_channel(
    summary: Summary, channel_id: int, kind: str, name: str, topic: str
) -> dict[str, Any]:
    channel = summary.channels[channel_id]
    schema = summary.schemas.get(channel.schema_id)
    if kind == CAMERA:
        encoding, schema_name, expected = msg.FRAME_ENCODING, msg.FRAME_SCHEMA, "frame"
    elif kind in VECTOR_KINDS:
        encoding, schema_name, expected = msg.VECTOR_ENCODING, msg.VECTOR_SCHEMA, "vector"
    else:
        raise SchemaError(f"unknown topic kind {kind!r}", file=name, topic=topic)
    if channel.message_encoding != encoding or schema is None or schema.name != schema_name:
        got = schema.name if schema else None
        raise SchemaError(
            f"expected {encoding}/{schema_name}, found {channel.message_encoding}/{got}",
            file=name,
            topic=topic,
        )
    try:
        return msg.parse_schema(schema.data, expected, topic=topic)
    except SchemaError as exc:
        exc.file = name
        raise
