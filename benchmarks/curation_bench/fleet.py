"""The real episodes both builders curate: synthetic containers (the project's own generator,
writer, QC and statistics) in moto's S3, each with a JSON sidecar next to it, registered in
Postgres the way ingest registers them, and mirrored into the warehouse by CDC."""

from __future__ import annotations

import io
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import psycopg
from fsspec.spec import AbstractFileSystem
from pinned import FLEET, MB, REAL_PREFIX, Params

from episodes.ingest import Prepared, prepare_bytes, register
from episodes.synth import synth_episode
from episodes.writer import WriteOptions, write_episode

SIDECAR_SUFFIX = ".json"


@dataclass(frozen=True)
class FleetFacts:
    episodes: int
    container_mb: float
    container_mean_bytes: int
    sidecar_mean_bytes: int
    flagged: int
    build_s: float


def container_key(robot_id: str, episode_id: str) -> str:
    return f"{REAL_PREFIX}/{robot_id}/{episode_id}.mcap"


def sidecar_key(container: str) -> str:
    return container.removesuffix(".mcap") + SIDECAR_SUFFIX


def sidecar(prepared: Prepared) -> dict[str, Any]:
    """What a file-based pipeline keeps next to each container: the facts a curation filters
    on that the container's header does not hold (QC outcome, checksum, who and what)."""
    record = prepared.record
    return {
        "episode_id": record.episode_id,
        "robot_id": record.robot_id,
        "task_id": record.task_id,
        "site": record.site,
        "operator": record.operator,
        "success": record.success,
        "quality_flags": sorted(prepared.quality.flag_names),
        "sha256": record.sha256,
        "robot_sw_version": record.stamps.robot_sw_version,
    }


def make_episode(seed: int, index: int) -> tuple[bytes, Prepared]:
    """Generate, encode, check and describe one episode (runs in a worker process)."""
    episode = synth_episode(seed, index, FLEET)
    buffer = io.BytesIO()
    write_episode(episode, buffer, WriteOptions())
    data = buffer.getvalue()
    uri = "s3://" + container_key(episode.robot_id, episode.episode_id)
    return data, prepare_bytes(data, uri)


def build_fleet(p: Params, fs: AbstractFileSystem, conn: psycopg.Connection[Any]) -> FleetFacts:
    """Write ``p.episodes`` containers and sidecars to S3 and register them."""
    started = time.perf_counter()
    total = sidecars = flagged = 0
    context = get_context("spawn")
    with ProcessPoolExecutor(max_workers=p.ingest_workers, mp_context=context) as pool:
        seeds = [p.seed] * p.episodes
        for data, prepared in pool.map(make_episode, seeds, range(p.episodes), chunksize=8):
            key = container_key(prepared.record.robot_id, prepared.record.episode_id)
            side = json.dumps(sidecar(prepared), sort_keys=True).encode()
            fs.pipe_file(key, data)
            fs.pipe_file(sidecar_key(key), side)
            register(conn, prepared)
            total, sidecars = total + len(data), sidecars + len(side)
            flagged += bool(prepared.quality.flag_names)
    return FleetFacts(
        episodes=p.episodes,
        container_mb=round(total / MB, 3),
        container_mean_bytes=total // p.episodes,
        sidecar_mean_bytes=sidecars // p.episodes,
        flagged=flagged,
        build_s=round(time.perf_counter() - started, 1),
    )
