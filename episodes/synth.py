"""A synthetic teleoperation fleet: deterministic episodes from ``(seed, index)``.

Each episode is a 6-joint arm whose end effector moves in the image plane ``(u, v)`` as a
linear function of the joints. The operator picks a yellow cube and carries it to a green
ring; the action at each control step is a clipped P-controller, in joint space, toward the
current target (the cube, then the ring, then home), and the gripper closes on the cube and
opens over the ring. The cameras show the cube, the ring, the effector and the gripper, so
the actions are a learnable function of the images and the joint state. A few percent of
episodes carry an injected fault (see :data:`FAULT_KINDS`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from . import _faults
from ._render import VIEWS, Renderer, SceneState
from .episode import (
    ACTIONS,
    GRIPPER,
    JOINT_POSITIONS,
    JOINT_VELOCITIES,
    CameraStream,
    EpisodeData,
    Stamps,
    VectorStream,
)

FAULT_KINDS = _faults.FAULT_KINDS
_NAMESPACE = uuid.UUID("6f1c8a52-3d0e-4b8f-9a57-0c1e7d2b4a90")
_EPOCH_NS = 1_767_600_000 * 1_000_000_000  # 2026-01-05T08:00:00Z
_HOME = (0.5, 0.5)


@dataclass(frozen=True)
class Robot:
    """A robot of the fleet and its camera rig (view name, frame rate in Hz)."""

    robot_id: str
    model: str
    site: str
    sw_version: str
    cameras: tuple[tuple[str, float], ...]


ROBOTS = (
    Robot("koi-01", "koi-6", "sfo", "3.2.0", (("front", 30.0), ("wrist", 30.0), ("side", 15.0))),
    Robot("koi-02", "koi-6", "sfo", "3.2.1", (("front", 30.0), ("wrist", 30.0), ("side", 15.0))),
    Robot("koi-03", "koi-6", "ber", "3.1.4", (("front", 30.0), ("wrist", 30.0), ("side", 15.0))),
    Robot("heron-01", "heron-6", "ber", "1.9.2", (("front", 30.0), ("wrist", 15.0))),
    Robot("heron-02", "heron-6", "tok", "1.9.2", (("front", 30.0), ("wrist", 15.0))),
    Robot("heron-03", "heron-6", "tok", "2.0.0", (("front", 30.0), ("wrist", 15.0))),
)
#: task id -> (description, targets visited in order).
TASKS = {
    "pick_place_cube": ("Pick the yellow cube and place it in the green ring", ("obj", "place")),
    "pick_cube": ("Pick up the yellow cube", ("obj", "lift")),
    "pick_place_return": ("Place the cube in the ring, then return home", ("obj", "place", "home")),
}
OPERATORS = ("op-ana", "op-ben", "op-chen", "op-dara", "op-eli")
N_JOINTS = 6


@dataclass(frozen=True)
class FleetConfig:
    """Pinned parameters of the synthetic fleet.

    :param width: frame width, pixels (even). :param height: frame height, pixels (even).
    :param cameras: camera rig (view, Hz) for every robot; ``None`` uses each robot's own.
    :param joint_hz: joint position/velocity rate, Hz. :param gripper_hz: gripper rate, Hz.
    :param control_hz: action rate, Hz. :param duration_s: episode length range, seconds.
    :param fault_rate: fraction of episodes with one injected fault.
    :param noise_sigma: camera sensor noise, 8-bit levels.
    """

    width: int = 128
    height: int = 96
    cameras: tuple[tuple[str, float], ...] | None = None
    joint_hz: float = 100.0
    gripper_hz: float = 50.0
    control_hz: float = 50.0
    duration_s: tuple[float, float] = (10.0, 20.0)
    fault_rate: float = 0.08
    noise_sigma: float = 2.0
    robots: tuple[Robot, ...] = field(default=ROBOTS)


def episode_id(seed: int, index: int) -> str:
    """The episode UUID of ``(seed, index)``: stable, so re-ingesting is idempotent."""
    return str(uuid.uuid5(_NAMESPACE, f"quarry-synth/{seed}/{index}"))


def synth_episode(
    seed: int, index: int, config: FleetConfig | None = None, faults: tuple[str, ...] | None = None
) -> EpisodeData:
    """Generate episode ``index`` of the fleet of ``seed``.

    ``faults`` overrides the random fault draw (tests inject a chosen fault this way).
    """
    cfg = config or FleetConfig()
    rng = np.random.default_rng([seed, index])
    robot = cfg.robots[int(rng.integers(len(cfg.robots)))]
    task_id = list(TASKS)[int(rng.integers(len(TASKS)))]
    if faults is None:
        faults = _faults.draw(rng, cfg.fault_rate)
    steps = round(float(rng.uniform(*cfg.duration_s)) * cfg.control_hz)
    start_ns = _EPOCH_NS + index * 600_000_000_000 + int(rng.integers(0, 60_000_000_000))
    period_ns = round(1e9 / cfg.control_hz)
    end_ns = start_ns + steps * period_ns
    sim = _simulate(rng, robot.model, TASKS[task_id][1], steps, cfg)
    cameras = _render_cameras(rng, sim, robot, start_ns, end_ns, cfg)
    vectors = _vector_streams(rng, sim, start_ns, end_ns, cfg)
    _faults.inject(rng, faults, cameras, vectors)
    return EpisodeData(
        episode_id=episode_id(seed, index),
        robot_id=robot.robot_id,
        robot_model=robot.model,
        task_id=task_id,
        task_description=TASKS[task_id][0],
        site=robot.site,
        operator=OPERATORS[int(rng.integers(len(OPERATORS)))],
        start_ns=start_ns,
        end_ns=end_ns,
        control_hz=cfg.control_hz,
        success=sim.success,
        cameras=cameras,
        vectors=vectors,
        stamps=Stamps(robot_sw_version=robot.sw_version),
        extra={"synth_seed": str(seed), "synth_index": str(index), "faults": ",".join(faults)},
    )


@dataclass
class _Sim:
    """Simulated trajectory at the joint rate, plus actions at the control rate."""

    q: npt.NDArray[np.float64]
    qd: npt.NDArray[np.float64]
    gripper: npt.NDArray[np.float64]
    effector: npt.NDArray[np.float64]
    obj: npt.NDArray[np.float64]
    held: npt.NDArray[np.bool_]
    place: tuple[float, float]
    actions: npt.NDArray[np.float64]
    success: bool


def _kinematics(model: str) -> npt.NDArray[np.float64]:
    """The model's map from joints to effector offset (2, N_JOINTS), fixed per model."""
    gen = np.random.default_rng(list(model.encode()))
    return gen.normal(0.0, 0.12, size=(2, N_JOINTS))


def _simulate(
    rng: np.random.Generator, model: str, plan: tuple[str, ...], steps: int, cfg: FleetConfig
) -> _Sim:
    kin = _kinematics(model)
    pinv = np.linalg.pinv(kin)
    sub = max(1, round(cfg.joint_hz / cfg.control_hz))
    dt = 1.0 / cfg.joint_hz
    gain = float(rng.uniform(0.3, 2.5))
    fumble = float(rng.uniform(0, 1)) < 0.15
    obj = rng.uniform(0.15, 0.85, size=2)
    place = rng.uniform(0.15, 0.85, size=2)
    q = pinv @ (rng.uniform(0.3, 0.7, size=2) - 0.5)
    qd, grip, phase, held, cmd = np.zeros(N_JOINTS), 0.0, 0, False, np.zeros(N_JOINTS + 1)
    rows: list[tuple[npt.NDArray[np.float64], ...]] = []
    flags: list[bool] = []
    actions = np.zeros((steps, N_JOINTS + 1))
    for i in range(steps * sub):
        eff = 0.5 + kin @ q
        if i % sub == 0:
            target = _target(plan[min(phase, len(plan) - 1)], obj, place)
            vel = np.clip(gain * (pinv @ (target - eff)), -1.5, 1.5)
            close = _gripper_command(plan, phase, held, eff, target)
            cmd = np.concatenate([vel + rng.normal(0, 0.02, N_JOINTS), [close]])
            actions[i // sub] = cmd
            phase, held = _advance(plan, phase, held, eff, target, grip)
            if fumble and held and phase == 1 and rng.uniform() < 0.05:
                held, fumble = False, False
        qd += (cmd[:N_JOINTS] - qd) * min(1.0, dt / 0.05)
        q = q + qd * dt
        grip += (cmd[N_JOINTS] - grip) * min(1.0, dt / 0.15)
        if held:
            obj = 0.5 + kin @ q
        rows.append((q.copy(), qd.copy(), np.array([grip]), 0.5 + kin @ q, obj.copy()))
        flags.append(held)
    q_arr, qd_arr, g_arr, e_arr, o_arr = (np.array(col) for col in zip(*rows, strict=True))
    done = phase >= len(plan)
    placed = bool(np.linalg.norm(obj - place) < 0.05)
    success = done and (placed if "place" in plan else held)
    return _Sim(
        q_arr, qd_arr, g_arr, e_arr, o_arr, np.array(flags), (place[0], place[1]), actions, success
    )


def _target(
    name: str, obj: npt.NDArray[np.float64], place: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    if name == "obj":
        return obj
    if name == "place":
        return place
    if name == "lift":
        return np.array([obj[0], max(0.1, obj[1] - 0.25)])
    return np.array(_HOME)


def _gripper_command(
    plan: tuple[str, ...],
    phase: int,
    held: bool,
    eff: npt.NDArray[np.float64],
    target: npt.NDArray[np.float64],
) -> float:
    near = bool(np.linalg.norm(eff - target) < 0.03)
    if phase < len(plan) and plan[phase] == "obj":
        return 1.0 if near else 0.0
    if phase < len(plan) and plan[phase] == "place":
        return 0.0 if near else 1.0
    return 1.0 if held else 0.0


def _advance(
    plan: tuple[str, ...],
    phase: int,
    held: bool,
    eff: npt.NDArray[np.float64],
    target: npt.NDArray[np.float64],
    grip: float,
) -> tuple[int, bool]:
    if phase >= len(plan) or np.linalg.norm(eff - target) >= 0.03:
        return phase, held
    step = plan[phase]
    if step == "obj" and grip > 0.9:
        return phase + 1, True
    if step == "place" and grip < 0.1:
        return phase + 1, False
    if step in ("lift", "home"):
        return phase + 1, held
    return phase, held


def _times(
    start_ns: int, end_ns: int, hz: float, rng: np.random.Generator, jitter_ns: int
) -> npt.NDArray[np.int64]:
    count = int((end_ns - start_ns) * hz // 1_000_000_000)
    nominal = start_ns + np.rint(np.arange(count) * (1e9 / hz)).astype(np.int64)
    times: npt.NDArray[np.int64] = nominal
    if jitter_ns:
        times = nominal + rng.integers(0, jitter_ns, size=count, dtype=np.int64)
    return times[times < end_ns]


def _sim_index(
    times: npt.NDArray[np.int64], start_ns: int, cfg: FleetConfig, size: int
) -> npt.NDArray[np.intp]:
    idx = ((times - start_ns) * cfg.joint_hz // 1_000_000_000).astype(np.intp)
    return np.clip(idx, 0, size - 1)


def _render_cameras(
    rng: np.random.Generator,
    sim: _Sim,
    robot: Robot,
    start_ns: int,
    end_ns: int,
    cfg: FleetConfig,
) -> list[CameraStream]:
    renderer = Renderer(rng, cfg.width, cfg.height, cfg.noise_sigma)
    cameras = []
    for view, fps in cfg.cameras or robot.cameras:
        times = _times(start_ns, end_ns, fps, rng, 1_000_000)
        idx = _sim_index(times, start_ns, cfg, len(sim.q))
        frames = np.empty((len(times), cfg.height, cfg.width, 3), dtype=np.uint8)
        for n, (t, i) in enumerate(zip(times, idx, strict=True)):
            state = SceneState(
                time_s=(int(t) - start_ns) / 1e9,
                effector=(float(sim.effector[i, 0]), float(sim.effector[i, 1])),
                obj=(float(sim.obj[i, 0]), float(sim.obj[i, 1])),
                place=sim.place,
                gripper=float(sim.gripper[i, 0]),
                held=bool(sim.held[i]),
            )
            frames[n] = renderer.render(VIEWS.index(view), state, n)
        cameras.append(CameraStream(f"/cam/{view}", fps, times, frames))
    return cameras


def _vector_streams(
    rng: np.random.Generator, sim: _Sim, start_ns: int, end_ns: int, cfg: FleetConfig
) -> list[VectorStream]:
    joints = tuple(f"joint_{j}" for j in range(N_JOINTS))
    jt = _times(start_ns, end_ns, cfg.joint_hz, rng, 300_000)
    ji = _sim_index(jt, start_ns, cfg, len(sim.q))
    gt = _times(start_ns, end_ns, cfg.gripper_hz, rng, 300_000)
    gi = _sim_index(gt, start_ns, cfg, len(sim.q))
    at = _times(start_ns, end_ns, cfg.control_hz, rng, 0)
    pos = sim.q[ji] + rng.normal(0, 0.001, size=(len(ji), N_JOINTS))
    vel = sim.qd[ji] + rng.normal(0, 0.01, size=(len(ji), N_JOINTS))
    names = (*(f"{j}_cmd" for j in joints), "gripper_cmd")
    return [
        VectorStream(
            "/state/joint_positions",
            JOINT_POSITIONS,
            cfg.joint_hz,
            joints,
            jt,
            pos.astype(np.float32),
        ),
        VectorStream(
            "/state/joint_velocities",
            JOINT_VELOCITIES,
            cfg.joint_hz,
            tuple(f"{j}_vel" for j in joints),
            jt.copy(),
            vel.astype(np.float32),
        ),
        VectorStream(
            "/state/gripper",
            GRIPPER,
            cfg.gripper_hz,
            ("gripper",),
            gt,
            sim.gripper[gi].astype(np.float32),
        ),
        VectorStream(
            "/action", ACTIONS, cfg.control_hz, names, at, sim.actions[: len(at)].astype(np.float32)
        ),
    ]
