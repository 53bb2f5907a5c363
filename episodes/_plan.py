"""Which topics of a foreign recording become which streams of the episode.

Topics named in the mapping keep their role. With ``auto`` on (the default), every topic with
an image schema becomes a camera when the mapping names no camera, and a lone
``sensor_msgs/msg/JointState`` topic gives joint positions (``position``) and, when recorded,
joint velocities (``velocity``) when the mapping names neither. A camera and joint positions
are required; actions come from the topic the mapping names, and when it names none they are
derived from the joint positions (:func:`episodes._streams.derive_actions`). A recording
with an unmapped topic that looks like commands (:func:`episodes.suggest.command_topics`) is
refused instead, unless the mapping sets ``derive_actions``: its actions were recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._formats import IMAGE_SCHEMAS, ROS_JOINT_STATE, Decoder, Decoders, schema_name
from ._scan import Recording
from .episode import ACTIONS, CAMERA, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES
from .errors import EpisodeError, SchemaError, TopicError
from .mapping import FieldStep, Mapping, TopicRole, parse_field
from .suggest import command_topics

REQUIRED_ROLES = (CAMERA, JOINT_POSITIONS)
#: Container topic of each vector role unless the mapping names one.
DEFAULT_TOPICS = {
    JOINT_POSITIONS: "/state/joint_positions",
    JOINT_VELOCITIES: "/state/joint_velocities",
    GRIPPER: "/state/gripper",
    ACTIONS: "/action",
}
#: Field read from a JointState topic for each role unless the mapping names one.
JOINT_STATE_FIELDS = {
    JOINT_POSITIONS: "position",
    JOINT_VELOCITIES: "velocity",
    GRIPPER: "position",
    ACTIONS: "velocity",
}
#: Field read from any other topic unless the mapping names one (std_msgs arrays and floats).
DEFAULT_FIELD = "data"


@dataclass(frozen=True)
class Planned:
    """A recorded topic and the stream it becomes.

    :param role: one of :data:`episodes.mapping.ROLES`.
    :param source: topic in the recording. :param topic: topic in the Quarry container.
    :param channel_id: the recording's channel. :param offset: byte offset of its channel record.
    :param steps: field path (vector roles). :param compressed: JPEG/PNG frames (cameras).
    :param optional: drop the stream quietly when its field is always empty (auto velocities).
    """

    role: str
    source: str
    topic: str
    channel_id: int
    offset: int
    schema: str
    decoder: Decoder
    steps: tuple[FieldStep, ...] = ()
    names: tuple[str, ...] | None = None
    rate_hz: float | None = None
    compressed: bool = False
    optional: bool = False


def plan_topics(rec: Recording, mapping: Mapping) -> list[Planned]:
    """The streams to read, checked against the recording's channels and schemas."""
    roles = list(mapping.topics)
    mapped = {t.topic for t in roles}
    if mapping.auto and not mapping.roles(CAMERA):
        roles += [TopicRole(t, CAMERA) for t in _topics_of(rec, set(IMAGE_SCHEMAS)) - mapped]
    auto_joints = mapping.auto and not (
        mapping.roles(JOINT_POSITIONS) or mapping.roles(JOINT_VELOCITIES)
    )
    optional: set[str] = set()
    if auto_joints:
        joints = sorted(_topics_of(rec, {ROS_JOINT_STATE}) - mapped)
        if len(joints) == 1:
            roles += [TopicRole(joints[0], JOINT_POSITIONS), TopicRole(joints[0], JOINT_VELOCITIES)]
            optional.add(JOINT_VELOCITIES)
    decoders = Decoders.create()
    planned = [_plan_one(rec, entry, decoders, entry.role in optional) for entry in roles]
    planned.sort(key=lambda p: (p.role != CAMERA, p.topic))
    _check_required(rec, planned)
    _check_actions(rec, planned, mapping)
    return planned


def _check_actions(rec: Recording, planned: list[Planned], mapping: Mapping) -> None:
    if mapping.derive_actions or any(p.role == ACTIONS for p in planned):
        return
    commands = command_topics(rec, {p.source for p in planned})
    if commands:
        raise TopicError(
            f"no topic for the required role {ACTIONS!r}: {commands} look like commands; "
            "name one in the mapping (role 'actions'), or set derive_actions = true to "
            "derive the actions from the joint positions",
            file=rec.name,
        )


def _topics_of(rec: Recording, schemas: set[str]) -> set[str]:
    return {
        c.topic
        for c in rec.channels.values()
        if schema_name(rec.schemas.get(c.schema_id)) in schemas
    }


def _plan_one(rec: Recording, entry: TopicRole, decoders: Decoders, optional: bool) -> Planned:
    channel = rec.topic_channel(entry.topic)
    if channel is None:
        raise TopicError("mapped topic is not in the recording", file=rec.name, topic=entry.topic)
    offset = rec.channel_offsets[channel.id]
    schema = rec.schemas.get(channel.schema_id)
    name = schema_name(schema)
    try:
        decoder = decoders.for_channel(channel, schema)
    except EpisodeError as exc:
        exc.file, exc.offset = rec.name, offset
        raise
    if entry.role == CAMERA:
        if name not in IMAGE_SCHEMAS:
            raise SchemaError(
                f"a camera needs an image schema ({sorted(IMAGE_SCHEMAS)}), found {name!r}",
                file=rec.name,
                topic=entry.topic,
                offset=offset,
            )
        topic, compressed = entry.name or entry.topic, IMAGE_SCHEMAS[name]
        steps: tuple[FieldStep, ...] = ()
    else:
        default = JOINT_STATE_FIELDS[entry.role] if name == ROS_JOINT_STATE else DEFAULT_FIELD
        topic, compressed = entry.name or DEFAULT_TOPICS[entry.role], False
        steps = parse_field(entry.field or default)
    return Planned(
        entry.role,
        entry.topic,
        topic,
        channel.id,
        offset,
        name,
        decoder,
        steps,
        entry.names,
        entry.rate_hz,
        compressed,
        optional,
    )


def _check_required(rec: Recording, planned: list[Planned]) -> None:
    for role in REQUIRED_ROLES:
        if not any(p.role == role for p in planned):
            hint = "name it in the mapping file" if role != CAMERA else "no image topic found"
            raise TopicError(f"no topic for the required role {role!r}: {hint}", file=rec.name)
    topics = [p.topic for p in planned]
    for topic in topics:
        if topics.count(topic) > 1:
            raise TopicError(
                "two streams would share a container topic", file=rec.name, topic=topic
            )
    for p in planned:
        if not rec.messages.get(p.channel_id):
            raise TopicError(
                "topic has no messages", file=rec.name, topic=p.source, offset=p.offset
            )
