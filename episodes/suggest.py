"""Propose the mapping file ``quarry ingest mcap`` needs for a recording, from its channels.

The rules, applied to topics that hold messages:

* every topic with an image schema (:data:`episodes._formats.IMAGE_SCHEMAS`) is a camera;
* a topic whose name says it commands the robot (``action``, ``command``, ``cmd``) and that
  carries a ``JointState`` (field ``position``) or a ``std_msgs`` number array or number
  (field ``data``) gives the actions, when exactly one topic qualifies;
* likewise a topic named ``gripper`` gives the gripper;
* the one remaining ``JointState`` topic (or the one named ``joint_states`` among several)
  gives joint positions and, when its first message records them, joint velocities.

No actions topic is not a gap: ingest then derives them (the next control step's joint
positions) and flags ``actions_derived``. Robot and task are ``"unknown"`` (``--robot`` and
``--task`` override them); a camera and joint positions that cannot be inferred are named in
the notes, and the mapping is then not enough on its own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._formats import IMAGE_SCHEMAS, ROS_JOINT_STATE, Decoders, schema_name, value
from ._scan import Recording
from .episode import ACTIONS, CAMERA, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES

_COMMAND = re.compile(r"action|command|cmd", re.IGNORECASE)
_GRIPPER = re.compile(r"gripper", re.IGNORECASE)
_NUMBERS = {
    f"std_msgs/msg/{kind}{suffix}"
    for kind in ("Float64", "Float32")
    for suffix in ("", "MultiArray")
}
#: What a suggested mapping's robot and task are until the user says.
UNKNOWN = "unknown"


def suggest_mapping(rec: Recording) -> tuple[dict[str, Any], list[str], dict[str, list[str]]]:
    """``(mapping, notes, roles by topic)`` for ``rec`` (module docstring); the mapping is the
    parsed form :func:`episodes.mapping.mapping_from_dict` takes."""
    names = {
        c.topic: schema_name(rec.schemas.get(c.schema_id))
        for cid, c in rec.channels.items()
        if rec.messages.get(cid)
    }
    topics: list[dict[str, Any]] = []
    topics += [{"topic": t, "role": CAMERA} for t in sorted(names) if names[t] in IMAGE_SCHEMAS]
    taken = {t["topic"] for t in topics}
    notes = [] if topics else ["no image topic: name a camera (role 'camera')"]
    for role, pattern in ((ACTIONS, _COMMAND), (GRIPPER, _GRIPPER)):
        found = _named_like(names, pattern, taken)
        if len(found) == 1:
            field = "position" if names[found[0]] == ROS_JOINT_STATE else "data"
            topics.append({"topic": found[0], "role": role, "field": field})
            taken.add(found[0])
        elif len(found) > 1:
            notes.append(f"several {role} candidates {found}: name one in the mapping")
    topics += _joints(rec, names, taken, notes)
    if not any(t["role"] == ACTIONS for t in topics):
        notes.append(
            "no actions topic: ingest derives actions from the joint positions "
            "(the next control step's) and flags actions_derived"
        )
    roles: dict[str, list[str]] = {}
    for entry in topics:
        roles.setdefault(entry["topic"], []).append(entry["role"])
    return {"robot": UNKNOWN, "task": UNKNOWN, "topics": topics}, notes, roles


def command_topics(rec: Recording, skip: set[str]) -> list[str]:
    """Topics with messages, outside ``skip``, that look like the robot's commands (the
    actions rule of the module docstring)."""
    names = {
        c.topic: schema_name(rec.schemas.get(c.schema_id))
        for cid, c in rec.channels.items()
        if rec.messages.get(cid)
    }
    return _named_like(names, _COMMAND, skip)


def _named_like(names: dict[str, str], pattern: re.Pattern[str], skip: set[str]) -> list[str]:
    found = [t for t in sorted(names) if t not in skip and pattern.search(t)]
    return [t for t in found if names[t] in _NUMBERS or names[t] == ROS_JOINT_STATE]


def _joints(
    rec: Recording, names: dict[str, str], taken: set[str], notes: list[str]
) -> list[dict[str, Any]]:
    joints = [t for t in sorted(names) if names[t] == ROS_JOINT_STATE and t not in taken]
    if len(joints) > 1:
        joints = [t for t in joints if "joint_states" in t] or joints
    if len(joints) != 1:
        found = f"{len(joints)} JointState topics" if joints else "no JointState topic"
        notes.append(f"{found}: name the joint positions (role 'joint_positions', a field)")
        return []
    topic = joints[0]
    out: list[dict[str, Any]] = [{"topic": topic, "role": JOINT_POSITIONS, "field": "position"}]
    if _has_velocities(rec, topic):
        out.append({"topic": topic, "role": JOINT_VELOCITIES, "field": "velocity"})
    return out


def _has_velocities(rec: Recording, topic: str) -> bool:
    """Whether the topic's first message records joint velocities."""
    channel = rec.topic_channel(topic)
    assert channel is not None  # the topic came from rec.channels
    try:
        decoder = Decoders.create().for_channel(channel, rec.schemas.get(channel.schema_id))
        return len(value(decoder(rec.messages[channel.id][0].data), "velocity")) > 0
    except Exception:  # a payload that does not decode: leave the velocities out
        return False


def mapping_text(mapping: dict[str, Any], notes: list[str], toml: bool) -> str:
    """The mapping as a file: TOML (notes as comments) or JSON."""
    if not toml:
        return json.dumps(mapping, indent=2) + "\n"
    lines = ["# Proposed by `quarry episodes inspect --suggest-mapping` (see docs/episodes.md)."]
    lines += [f"# {note}" for note in notes]
    lines += ["# robot and task: set them here or pass --robot and --task to `ingest mcap`."]
    lines += [f"{key} = {json.dumps(mapping[key])}" for key in ("robot", "task")]
    for entry in mapping["topics"]:
        lines += ["", "[[topics]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in entry.items()]
    return "\n".join(lines) + "\n"
