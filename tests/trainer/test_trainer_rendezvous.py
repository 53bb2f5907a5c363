"""Each attempt's store: a restarted rank never joins the previous attempt's (dead) store."""

from __future__ import annotations

import socket
import threading
import time

from torch._C._distributed_c10d import Store, TCPStore

from trainer.rendezvous import NONCE_KEY, PUBLISHED_KEY, count_attempt, open_attempt_store
from trainer.world import World


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_stale_address_is_skipped_until_rank_0_publishes() -> None:
    agent = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    agent.set(PUBLISHED_KEY, f"127.0.0.1|{dead_port()}|nonce-of-the-last-attempt")
    worlds = [
        World(
            rank=rank,
            world_size=2,
            local_rank=rank,
            local_world_size=2,
            launched=True,
            master_addr="127.0.0.1",
            master_port=agent.port,
            agent_store=True,
        )
        for rank in (0, 1)
    ]
    stores: dict[int, Store] = {}

    def rank_0_starts_late() -> None:
        time.sleep(0.5)
        stores[0] = open_attempt_store(worlds[0], timeout_s=10)

    thread = threading.Thread(target=rank_0_starts_late)
    thread.start()
    stores[1] = open_attempt_store(worlds[1], timeout_s=10)
    thread.join()
    assert stores[1].get(NONCE_KEY) == stores[0].get(NONCE_KEY)
    stores[1].set("hello", "from rank 1")
    assert stores[0].get("hello") == b"from rank 1"


def test_the_agent_store_counts_attempts() -> None:
    agent = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    world = World(launched=True, master_addr="127.0.0.1", master_port=agent.port, agent_store=True)
    assert [count_attempt(world, timeout_s=10) for _ in range(3)] == [0, 1, 2]
