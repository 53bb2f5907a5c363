"""The mapping file of a foreign recording: which topic plays which role, and the stamps.

A mapping is TOML (``.toml``) or JSON (any other suffix) with these keys, all optional::

    robot = "ur5-03"              # robot id (``--robot`` overrides)
    robot_model = "ur5e"          # default: the robot id
    site = "lab-a"                # default "unknown"
    operator = "op-kim"           # default "unknown"
    task = "pick_cube"            # task id (``--task`` overrides)
    task_description = "Pick up the cube"
    success = true                # default false: unknown outcomes do not pass as successes
    control_hz = 50.0             # default: the actions topic's rate
    window_s = 2.0                # container window W, seconds
    timestamps = "header"         # "header": the message's own stamp where it has a non-zero
                                  # one, else its log time; "log": always the log time
    auto = true                   # detect cameras and a lone JointState topic (see below)
    derive_actions = false        # no actions topic mapped: derive them from the joint
                                  # positions even when a topic looks like commands
    schema_version = 1            # stamps; defaults: this package's SCHEMA_VERSION,
    pipeline_version = 1          # PIPELINE_VERSION and "unknown"
    robot_sw_version = "2.3.1"

    [[topics]]
    topic = "/gripper/state"      # topic in the recording
    role = "gripper"              # camera | joint_positions | joint_velocities | gripper | actions
    field = "position[0]"         # vector roles: path into the decoded message
    names = ["gripper"]           # dimension names (default: JointState names, or role_i)
    rate_hz = 20.0                # nominal rate (default: estimated from the timestamps)
    name = "/state/gripper"       # topic in the Quarry container (defaults in foreign.py)

A field path is dotted names, each optionally indexed (``[2]``) or sliced (``[0:6]``), e.g.
``data``, ``position[0:6]`` or ``command.velocity``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .episode import ACTIONS, CAMERA, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES
from .errors import InputError

ROLES = (CAMERA, JOINT_POSITIONS, JOINT_VELOCITIES, GRIPPER, ACTIONS)
TIMESTAMP_SOURCES = ("header", "log")
_STEP = re.compile(r"([A-Za-z_]\w*)(?:\[(\d+)(?::(\d+))?\])?")
#: Largest mapping file accepted, bytes.
MAX_MAPPING_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FieldStep:
    """One step of a field path: a name, then optionally an index or a slice ``[start:stop]``."""

    name: str
    start: int | None = None
    stop: int | None = None
    sliced: bool = False


def parse_field(path: str) -> tuple[FieldStep, ...]:
    """Parse a field path such as ``position[0:6]``; :class:`InputError` when malformed."""
    steps = []
    for part in path.split("."):
        match = _STEP.fullmatch(part)
        if match is None:
            raise InputError(f"malformed field path {path!r}")
        name, start, stop = match.groups()
        steps.append(
            FieldStep(
                name,
                int(start) if start is not None else None,
                int(stop) if stop is not None else None,
                sliced=stop is not None,
            )
        )
    return tuple(steps)


@dataclass(frozen=True)
class TopicRole:
    """One recorded topic and the role it plays (see the module docstring for the keys)."""

    topic: str
    role: str
    field: str | None = None
    names: tuple[str, ...] | None = None
    rate_hz: float | None = None
    name: str | None = None


@dataclass(frozen=True)
class Mapping:
    """How to read a foreign recording; every field is optional (module docstring)."""

    robot: str | None = None
    robot_model: str | None = None
    site: str = "unknown"
    operator: str = "unknown"
    task: str | None = None
    task_description: str = ""
    success: bool = False
    control_hz: float | None = None
    window_s: float = 2.0
    timestamps: str = "header"
    auto: bool = True
    derive_actions: bool = False
    schema_version: int | None = None
    pipeline_version: int | None = None
    robot_sw_version: str | None = None
    topics: tuple[TopicRole, ...] = field(default_factory=tuple)

    def with_overrides(self, **values: Any) -> Mapping:
        """A copy with the given fields replaced; ``None`` values leave a field as it is."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})

    def roles(self, role: str) -> list[TopicRole]:
        """The mapped topics of ``role``."""
        return [t for t in self.topics if t.role == role]


def load_mapping(path: Path) -> Mapping:
    """Read a mapping file (TOML for ``.toml``, else JSON) and check it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read mapping: {exc}", file=str(path)) from exc
    if len(data) > MAX_MAPPING_BYTES:
        raise InputError("mapping file too large", file=str(path))
    try:
        body = tomllib.loads(data.decode()) if path.suffix == ".toml" else json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise InputError(f"mapping is not valid {kind}: {exc}", file=str(path)) from exc
    if not isinstance(body, dict):
        raise InputError("mapping must be a table/object", file=str(path))
    try:
        return mapping_from_dict(body)
    except InputError as exc:
        exc.file = str(path)
        raise


_SCALARS: dict[str, tuple[type, ...]] = {
    "robot": (str,),
    "robot_model": (str,),
    "site": (str,),
    "operator": (str,),
    "task": (str,),
    "task_description": (str,),
    "success": (bool,),
    "control_hz": (int, float),
    "window_s": (int, float),
    "timestamps": (str,),
    "auto": (bool,),
    "derive_actions": (bool,),
    "schema_version": (int,),
    "pipeline_version": (int,),
    "robot_sw_version": (str,),
}
_TOPIC_KEYS: dict[str, tuple[type, ...]] = {
    "topic": (str,),
    "role": (str,),
    "field": (str,),
    "names": (list,),
    "rate_hz": (int, float),
    "name": (str,),
}


def mapping_from_dict(body: dict[str, Any]) -> Mapping:
    """Build and check a :class:`Mapping` from its parsed form; unknown keys are refused."""
    values = _typed(body, {**_SCALARS, "topics": (list,)}, "mapping")
    topics = tuple(_topic_role(entry, i) for i, entry in enumerate(values.pop("topics", [])))
    for key in ("control_hz", "window_s"):
        if key in values:
            values[key] = float(values[key])
            if values[key] <= 0:
                raise InputError(f"{key} must be positive")
    if values.get("timestamps", "header") not in TIMESTAMP_SOURCES:
        raise InputError(f"timestamps must be one of {TIMESTAMP_SOURCES}")
    for role in ROLES[1:]:
        if sum(t.role == role for t in topics) > 1:
            raise InputError(f"role {role!r} is mapped more than once")
    return Mapping(**values, topics=topics)


def _topic_role(entry: Any, index: int) -> TopicRole:
    where = f"topics[{index}]"
    if not isinstance(entry, dict):
        raise InputError(f"{where} must be a table/object")
    values = _typed(entry, _TOPIC_KEYS, where)
    if "topic" not in values or "role" not in values:
        raise InputError(f"{where} needs both 'topic' and 'role'")
    if values["role"] not in ROLES:
        raise InputError(f"{where}: role must be one of {ROLES}", topic=values["topic"])
    if values["role"] == CAMERA and "field" in values:
        raise InputError(f"{where}: a camera takes no field", topic=values["topic"])
    if "field" in values:
        parse_field(values["field"])
    if "names" in values:
        if not all(isinstance(n, str) for n in values["names"]):
            raise InputError(f"{where}: names must be strings", topic=values["topic"])
        values["names"] = tuple(values["names"])
    if "rate_hz" in values:
        values["rate_hz"] = float(values["rate_hz"])
        if values["rate_hz"] <= 0:
            raise InputError(f"{where}: rate_hz must be positive", topic=values["topic"])
    return TopicRole(**values)


def _typed(body: dict[str, Any], keys: dict[str, tuple[type, ...]], where: str) -> dict[str, Any]:
    unknown = sorted(set(body) - set(keys))
    if unknown:
        raise InputError(f"{where}: unknown keys {unknown}")
    for key, value in body.items():
        # bool is an int in Python; a number key must not take true/false.
        wrong = isinstance(value, bool) and bool not in keys[key]
        if wrong or not isinstance(value, keys[key]):
            raise InputError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    return dict(body)
