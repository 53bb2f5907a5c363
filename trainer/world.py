"""Where this process sits in the job: ranks, sizes and attempt, from the launcher's variables.

torchrun (and a Kubernetes PyTorchJob) describe the job in environment variables. They are read
here, from a mapping the entry point passes in, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError

_NO_RUN_ID = "none"


LAUNCH_ENV = "QUARRY_TRAINER_LAUNCH_ID"
"""Names the launch (one torchrun agent started by :func:`trainer.launch.launch_run`) to its
workers, which put it in their failure records (see :mod:`trainer.supervisor`)."""


@dataclass(frozen=True)
class World:
    """This process's place in the job.

    :param rank: global rank.
    :param world_size: processes in the job.
    :param local_rank: rank on this node.
    :param local_world_size: processes on this node.
    :param node_rank: this node's rank (torchrun's group rank).
    :param num_nodes: nodes in the job.
    :param restart_count: how many times the worker group was restarted (0 on the first try).
    :param max_restarts: restarts torchrun allows.
    :param run_id: the launcher's job ID, if it set one.
    :param launched: ``True`` under a launcher; ``False`` for a lone process (world of one).
    :param master_addr: host of the job's store (torchrun's agent store, or rank 0's).
    :param master_port: its port.
    :param agent_store: ``True`` when the store is torchrun's agent store, shared by all the
        attempts of the job (so keys of an earlier attempt may still be in it).
    :param launch_id: the launch this worker belongs to, when ``launch_run`` started it.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    restart_count: int = 0
    max_restarts: int = 0
    run_id: str | None = None
    launched: bool = False
    master_addr: str | None = None
    master_port: int | None = None
    agent_store: bool = False
    launch_id: str | None = None

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> World:
        """Read torchrun's (or a PyTorchJob's) variables from ``env``.

        Without ``WORLD_SIZE`` the process is alone: rank 0 of a world of one.

        :raises ConfigError: a variable is not an integer, or the ranks are inconsistent.
        """
        if "WORLD_SIZE" not in env:
            return cls()
        world_size = _int(env, "WORLD_SIZE", 1)
        local_world_size = _int(env, "LOCAL_WORLD_SIZE", 1)
        run_id = env.get("TORCHELASTIC_RUN_ID")
        world = cls(
            rank=_int(env, "RANK", 0),
            world_size=world_size,
            local_rank=_int(env, "LOCAL_RANK", 0),
            local_world_size=local_world_size,
            node_rank=_int(env, "GROUP_RANK", _int(env, "RANK", 0) // local_world_size),
            num_nodes=_int(env, "GROUP_WORLD_SIZE", max(1, world_size // local_world_size)),
            restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
            max_restarts=_int(env, "TORCHELASTIC_MAX_RESTARTS", 0),
            run_id=None if run_id in (None, "", _NO_RUN_ID) else run_id,
            launched=True,
            master_addr=env.get("MASTER_ADDR"),
            master_port=_int(env, "MASTER_PORT", 0) or None,
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
            launch_id=env.get(LAUNCH_ENV) or None,
        )
        world.check()
        return world

    def check(self) -> None:
        """Raise :class:`ConfigError` when the ranks do not describe a valid job."""
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"RANK {self.rank} outside [0, {self.world_size})")
        if not 0 <= self.local_rank < self.local_world_size:
            raise ConfigError(f"LOCAL_RANK {self.local_rank} outside [0, {self.local_world_size})")
        if not 0 <= self.node_rank < self.num_nodes:
            raise ConfigError(f"node rank {self.node_rank} outside [0, {self.num_nodes})")

    @property
    def is_coordinator(self) -> bool:
        """Rank 0: writes the run's records, commit markers and the summary."""
        return self.rank == 0

    @property
    def is_node_leader(self) -> bool:
        """Local rank 0: fetches the manifest and warms the cache for its node."""
        return self.local_rank == 0


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc
