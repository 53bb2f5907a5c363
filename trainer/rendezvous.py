"""A fresh key-value store for each attempt of the job, so restarts never read stale keys.

torchrun keeps one agent store for the whole job and hands every attempt's workers the same
``MASTER_ADDR:MASTER_PORT`` without a per-attempt prefix. Process groups write their peers'
addresses into that store under fixed keys, so after a restart a fast rank can read the address
a dead rank of the previous attempt published and fail with "connection refused" (seen here
with gloo). Instead, rank 0 starts a new store server for its attempt and publishes its address
and a random nonce in the agent store; the other ranks connect to whatever address is published
and accept it only when the server there holds the same nonce. A stale entry points to a dead
server (or one without that nonce), so they read again until rank 0 of their own attempt has
published.

The agent store also counts the job's attempts (``count_attempt``): torchrun's restart count is
each agent's own, and on several nodes it can lag behind the job's (see
:func:`trainer.worker.agreed_attempt`).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import socket
import time

import torch.distributed as dist
from torch._C._distributed_c10d import Store, TCPStore

from .errors import ConfigError, TrainerError
from .world import World

log = logging.getLogger(__name__)

PUBLISHED_KEY = "quarry/attempt_store"
NONCE_KEY = "quarry/nonce"
ATTEMPTS_KEY = "quarry/attempts"
_CONNECT_S = 2.0
_RETRY_S = 0.1


def open_attempt_store(world: World, timeout_s: float) -> Store:
    """The store this attempt's process groups rendezvous on (see the module docstring).

    :raises TrainerError: rank 0's store was not found within ``timeout_s`` (retryable).
    """
    if world.master_addr is None or world.master_port is None:
        raise ConfigError("the launcher set no MASTER_ADDR / MASTER_PORT")
    timeout = dt.timedelta(seconds=timeout_s)
    agent = TCPStore(world.master_addr, world.master_port, is_master=False, timeout=timeout)
    if world.rank == 0:
        server = TCPStore(
            world.master_addr, 0, is_master=True, wait_for_workers=False, timeout=timeout
        )
        nonce = secrets.token_hex(16)
        server.set(NONCE_KEY, nonce)
        agent.set(PUBLISHED_KEY, f"{world.master_addr}|{server.port}|{nonce}")
        return server
    return _join(agent, timeout_s)


def count_attempt(world: World, timeout_s: float) -> int:
    """Count this attempt in the agent store (rank 0, once per attempt); return how many
    attempts were counted before it.

    The counter lives as long as the agent store: the whole job, unless an elastic change of
    membership moves rank 0 to another node (then it starts again from 0).
    """
    if world.master_addr is None or world.master_port is None:
        raise ConfigError("the launcher set no MASTER_ADDR / MASTER_PORT")
    timeout = dt.timedelta(seconds=timeout_s)
    agent = TCPStore(world.master_addr, world.master_port, is_master=False, timeout=timeout)
    return int(agent.add(ATTEMPTS_KEY, 1)) - 1


def _join(agent: Store, timeout_s: float) -> Store:
    deadline = time.monotonic() + timeout_s
    while True:
        host, port, nonce = agent.get(PUBLISHED_KEY).decode().split("|")
        store = _connect(host, int(port), nonce)
        if store is not None:
            store.set_timeout(dt.timedelta(seconds=timeout_s))
            return store
        if time.monotonic() > deadline:
            raise TrainerError(
                f"rank 0's store was not published within {timeout_s} s", retryable=True
            )
        time.sleep(_RETRY_S)


def _connect(host: str, port: int, nonce: str) -> Store | None:
    """A client of the store at ``host:port`` if it is alive and holds ``nonce``."""
    try:
        # A plain probe first: a dead server refuses at once, without TCPStore's retries.
        socket.create_connection((host, port), timeout=_CONNECT_S).close()
        store = TCPStore(host, port, is_master=False, timeout=dt.timedelta(seconds=_CONNECT_S))
        if store.get(NONCE_KEY).decode() == nonce:
            return store
    except (OSError, RuntimeError, dist.DistError) as exc:
        log.debug("store at %s:%d is stale: %s", host, port, exc)
    return None
