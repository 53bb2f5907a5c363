"""Ingest: write containers into the object store, check them, and register them.

``ingest_synth`` is what ``quarry ingest synth`` runs. Episode ids derive from
``(seed, index)``, so running it again registers nothing twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import psycopg

from .episode import PIPELINE_VERSION, EpisodeData
from .quality import QualityReport, check_episode
from .reader import EpisodeReader
from .registry import (
    EpisodeRecord,
    RegistryError,
    SourceRecord,
    record_from_info,
    register_episode,
    registered_ids,
)
from .stats import DimStats, episode_stats
from .synth import FleetConfig, episode_id, synth_episode
from .writer import WriteOptions, write_episode


@dataclass(frozen=True)
class IngestResult:
    """One ingested episode: where it is stored and what QC found."""

    episode_id: str
    uri: str
    robot_id: str
    task_id: str
    size_bytes: int
    sha256: str
    success: bool
    flags: tuple[str, ...]
    created: bool


@dataclass(frozen=True)
class Prepared:
    """A container written to the object store, with its row, QC and statistics."""

    record: EpisodeRecord
    quality: QualityReport
    stats: list[DimStats]
    source: SourceRecord | None = None


def container_path(objects_root: Path, robot_id: str, episode: str, sha256: str) -> Path:
    """Where a container version lives:
    ``<objects_root>/episodes/<robot>/<episode_id>/<sha256[:16]>.mcap``.

    Content-addressed, so each processing of an episode writes a file of its own (a manifest
    built before keeps reading the version it lists) and writing the same bytes twice (a
    redone pipeline step) lands on the same file. Containers registered before container
    versions existed keep their ``<robot>/<episode_id>.mcap`` path.
    """
    return objects_root / "episodes" / robot_id / episode / f"{sha256[:16]}.mcap"


def encode_container(
    episode: EpisodeData, objects_root: Path, options: WriteOptions
) -> tuple[str, bytes]:
    """Write ``episode`` atomically into the object store; its ``file://`` URI and bytes."""
    buffer = io.BytesIO()
    write_episode(episode, buffer, options)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    path = container_path(objects_root.resolve(), episode.robot_id, episode.episode_id, digest)
    if not (path.is_file() and path.stat().st_size == len(data)):
        write_atomic(path, data)
    return "file://" + str(path), data


def store_episode(episode: EpisodeData, objects_root: Path, options: WriteOptions) -> Prepared:
    """Write ``episode`` atomically into the object store; check it and compute statistics."""
    uri, data = encode_container(episode, objects_root, options)
    return prepare_bytes(data, uri)


def prepare_bytes(data: bytes, uri: str) -> Prepared:
    """QC, statistics and the row of the container ``data`` stored at ``uri``."""
    reader = EpisodeReader(io.BytesIO(data), name=uri)
    quality = check_episode(reader)
    stats = episode_stats(reader)
    record = record_from_info(reader.info, uri, len(data), hashlib.sha256(data).hexdigest())
    return Prepared(record, quality, stats)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def register(conn: psycopg.Connection[Any], prepared: Prepared) -> IngestResult:
    """Register a prepared container and describe the outcome."""
    created = register_episode(
        conn, prepared.record, prepared.quality, prepared.stats, prepared.source
    )
    rec = prepared.record
    return IngestResult(
        rec.episode_id,
        rec.uri,
        rec.robot_id,
        rec.task_id,
        rec.size_bytes,
        rec.sha256,
        rec.success,
        tuple(prepared.quality.flag_names),
        created,
    )


def _synth_one(
    seed: int, index: int, objects_root: Path, config: FleetConfig | None, pipeline_version: int
) -> Prepared:
    episode = synth_episode(seed, index, config)
    episode.stamps = dataclasses.replace(episode.stamps, pipeline_version=pipeline_version)
    prepared = store_episode(episode, objects_root, WriteOptions())
    source = synth_source(episode.episode_id, seed, index, config)
    return dataclasses.replace(prepared, source=source)


def synth_source(
    episode_id: str, seed: int, index: int, config: FleetConfig | None
) -> SourceRecord:
    """The source of a synthetic episode: its generator's parameters, hashed as a file's
    bytes are (a changed fleet is another source)."""
    options = {"seed": seed, "index": index, "config": dataclasses.asdict(config or FleetConfig())}
    text = json.dumps(options, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return SourceRecord(episode_id, "synth", f"synth:{seed}/{index}", len(text), digest, options)


def ingest_synth(
    conn: psycopg.Connection[Any],
    objects_root: Path,
    episodes: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    config: FleetConfig | None = None,
    workers: int | None = None,
    pipeline_version: int = PIPELINE_VERSION,
) -> list[IngestResult]:
    """Generate, store, check and register synthetic episodes ``0..episodes-1`` of ``seed``.

    Episodes already registered are skipped (reported with ``created=False`` and no flags).
    ``workers`` processes generate and encode in parallel (default: CPU count, at most 4);
    registration happens here, one transaction per episode. Results follow index order.
    ``progress(done, total)`` is called with episodes done (skipped ones included).
    ``pipeline_version`` is the stamp written (an older one makes stale episodes on purpose).
    """
    ids = [episode_id(seed, i) for i in range(episodes)]
    done = registered_ids(conn, ids)
    todo = [i for i, eid in enumerate(ids) if eid not in done]
    results: dict[int, IngestResult] = {}
    for index, prepared in _prepare_all(
        seed, todo, objects_root, config, workers, pipeline_version
    ):
        results[index] = register(conn, prepared)
        if progress is not None:
            progress(episodes - len(todo) + len(results), episodes)
    for index in set(range(episodes)) - set(results):
        results[index] = existing_result(conn, ids[index])
    return [results[i] for i in range(episodes)]


def _prepare_all(
    seed: int,
    todo: list[int],
    root: Path,
    config: FleetConfig | None,
    workers: int | None,
    version: int,
) -> Iterator[tuple[int, Prepared]]:
    count = workers if workers is not None else min(4, os.cpu_count() or 1)
    if count <= 1 or len(todo) <= 1:
        for index in todo:
            yield index, _synth_one(seed, index, root, config, version)
        return
    with ProcessPoolExecutor(max_workers=count, mp_context=get_context("spawn")) as pool:
        futures = [(i, pool.submit(_synth_one, seed, i, root, config, version)) for i in todo]
        for index, future in futures:
            yield index, future.result()


def existing_result(conn: psycopg.Connection[Any], episode: str) -> IngestResult:
    """The result of an episode registered earlier (``created=False``, no flags)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT uri, robot_id, task_id, size_bytes, sha256, success FROM episodes"
            " WHERE id = %s",
            (episode,),
        )
        row = cur.fetchone()
    if row is None:
        raise RegistryError("episode row vanished during ingest", file=episode)
    uri, robot, task, size, sha, success = row
    return IngestResult(episode, uri, robot, task, size, sha, success, (), False)
