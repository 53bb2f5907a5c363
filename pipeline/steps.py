"""The steps of a recording's workflow, as plain functions of the job and the worker's
paths. Each returns something small (it is recorded in DBOS's system database); bulky
intermediates (decoded streams, the episode) go to the workflow's folder as pickles, written
by rename, so a step that is redone after a crash overwrites a whole file or none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from episodes.episode import ACTIONS, EpisodeData
from episodes.errors import SourceError
from episodes.foreign import (
    add_ingest_flags,
    add_source_failures,
    decode_recording,
    transform_recording,
)
from episodes.ingest import encode_container, write_atomic
from episodes.quality import QualityFlag, QualityReport, check_episode
from episodes.reader import EpisodeReader
from episodes.registry import record_from_info, register_episode
from episodes.stats import DimStats, episode_stats
from episodes.synth import synth_episode
from episodes.versions import (
    CONTAINER,
    MCAP,
    SYNTH,
    carry_ingest_flags,
    fleet_from_dict,
    mapping_of_source,
    register_version,
    update_metadata,
)
from episodes.writer import WriteOptions, write_episode

from . import objects
from .errors import PipelineError
from .evaluation import write_evaluations
from .job import Job, WorkerPaths

#: Idle segments: actions that move less than this (per dimension, per control step) ...
IDLE_EPSILON = 1e-3
#: ... for at least this long, seconds.
IDLE_MIN_S = 1.0
#: Author of the labels the enrichment step computes (replaced on each processing).
ENRICH_AUTHOR = "pipeline:enrich"


#: A workflow folder's step files: a copy of a source in S3 (``fetch``), the decoded streams
#: (``decode``), the episode (``transform``); the bulky intermediates, removed once the episode
#: registered (:func:`clean`). ``steps.log`` stays.
SOURCE_FILE, DECODED_FILE, EPISODE_FILE = "source.mcap", "decoded.pkl", "episode.pkl"
STEP_FILES = (SOURCE_FILE, DECODED_FILE, EPISODE_FILE)


def fetch(job: Job, paths: WorkerPaths, workflow_id: str) -> str:
    """The source's local path, checked against its recorded SHA-256 (a synthetic source
    has no file: its parameters are the source; one in S3 is copied into the workflow's
    folder)."""
    source = job.source
    if source.kind == SYNTH:
        return source.uri
    if source.kind == CONTAINER and not source.uri.startswith(("file://", "s3://")):
        raise SourceError("container neither local nor in S3", file=source.uri, retryable=False)
    target = paths.folder(workflow_id) / SOURCE_FILE
    return str(objects.local_copy(source.uri, source.sha256, target, paths.storage_options))


def source_here(job: Job, paths: WorkerPaths, workflow_id: str, source_path: str) -> str:
    """``source_path`` when it is on this machine, else fetched again (a workflow resumed
    on another machine than the one that ran ``fetch``)."""
    if job.source.kind == SYNTH or Path(source_path).is_file():
        return source_path
    return fetch(job, paths, workflow_id)


def decoded_here(job: Job, paths: WorkerPaths, workflow_id: str, decoded: str) -> str:
    """The ``decode`` step file when it is on this machine, else decoded again from the
    source (the step files are each machine's own)."""
    if Path(decoded).is_file():
        return decoded
    return decode(job, paths, workflow_id, fetch(job, paths, workflow_id))


def episode_here(job: Job, paths: WorkerPaths, workflow_id: str, transformed: str) -> str:
    """The ``transform`` step file when it is on this machine, else made again from the
    source (decoded, transformed: deterministic, so the same episode)."""
    if Path(transformed).is_file():
        return transformed
    decoded = decode(job, paths, workflow_id, fetch(job, paths, workflow_id))
    return transform(job, paths, workflow_id, decoded)


def decode(job: Job, paths: WorkerPaths, workflow_id: str, source_path: str) -> str:
    """Decode the source (a synthetic source: generate it); the pickle's path."""
    options = job.source.options
    data: object
    if job.source.kind == SYNTH:
        data = synth_episode(options["seed"], options["index"], fleet_from_dict(options["config"]))
    elif job.source.kind == MCAP:
        mapping = mapping_of_source(options["mapping"])
        data = decode_recording(Path(source_path), mapping, salvage=bool(options["salvage"]))
    else:
        raise PipelineError("unknown source kind", episode=job.source.episode_id)
    return _dump(paths.folder(workflow_id) / DECODED_FILE, data)


def transform(job: Job, paths: WorkerPaths, workflow_id: str, decoded: str) -> str:
    """Build the episode (control grid, rates, derived actions) and stamp it."""
    data = _load(decoded)
    extra_flags: dict[str, Any] = {}
    if job.source.kind == SYNTH:
        assert isinstance(data, EpisodeData)
        episode = data
    else:
        foreign = transform_recording(
            data, job.source.sha256, mapping_of_source(job.source.options["mapping"])
        )
        episode = foreign.episode
        extra_flags = {"foreign": foreign}
    episode.stamps = _with_version(episode, job.pipeline_version)
    if episode.episode_id != job.source.episode_id:
        raise PipelineError("source gives another episode id", episode=job.source.episode_id)
    return _dump(paths.folder(workflow_id) / EPISODE_FILE, (episode, extra_flags))


def encode(job: Job, paths: WorkerPaths, transformed: str) -> dict[str, Any]:
    """Write the container (content-addressed: a redone encode lands on the same file)."""
    episode, _ = _load(transformed)
    window = job.source.options.get("mapping", {}).get("window_s", 2.0)
    options = WriteOptions(window_s=window)
    if paths.objects_url is None:
        uri, data = encode_container(episode, paths.objects, options)
    else:
        buffer = io.BytesIO()
        write_episode(episode, buffer, options)
        data = buffer.getvalue()
        key = objects.container_key(
            episode.robot_id, episode.episode_id, hashlib.sha256(data).hexdigest()
        )
        uri = paths.objects_url.rstrip("/") + "/" + key
        objects.put(uri, data, paths.storage_options)
    return {"uri": uri, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def qc(
    container: dict[str, Any],
    transformed: str | None,
    conn: psycopg.Connection[Any] | None,
    store: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Quality flags and report of the container, with the source's decode failures (from
    the decoded source, or from the episode's row when ``transformed`` is ``None``);
    ``store``: s3fs's options for a container in S3."""
    reader = _reader(container, store)
    quality = check_episode(reader)
    if transformed is None:
        assert conn is not None
        carry_ingest_flags(conn, str(reader.info.episode["episode_id"]), quality)
    else:
        _, extra = _load(transformed)
        if "foreign" in extra:
            add_source_failures(quality, extra["foreign"].source_failures)
            add_ingest_flags(quality, extra["foreign"])
    return {
        "flags": [(f.flag, f.detail) for f in quality.flags],
        "report": quality.report,
    }


def stats(container: dict[str, Any], store: dict[str, Any] | None = None) -> list[DimStats]:
    """Per-dimension statistics of the container's state and actions."""
    return episode_stats(_reader(container, store))


def enrich(
    container: dict[str, Any], store: dict[str, Any] | None = None
) -> list[tuple[str, str, int | None, int | None]]:
    """Labels computed from the data: ``idle`` segments (actions still for >= 1 s) and
    ``outcome`` (the episode's success)."""
    reader = _reader(container, store)
    labels: list[tuple[str, str, int | None, int | None]] = [
        ("outcome", "success" if reader.info.episode.get("success") else "failure", None, None)
    ]
    topic = reader.info.vector(ACTIONS)
    if topic is not None:
        times, values = reader.read_vectors(topic.topic)
        labels += [("idle", "true", s, e) for s, e in idle_segments(times, values)]
    return labels


def idle_segments(times: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """``[start_ns, end_ns)`` ranges where every action dimension moves less than
    :data:`IDLE_EPSILON` per sample, for at least :data:`IDLE_MIN_S`."""
    if len(times) < 2:
        return []
    still = np.all(np.abs(np.diff(values, axis=0)) < IDLE_EPSILON, axis=1)
    out, start = [], None
    for i, flag in enumerate([*still.tolist(), False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if (times[i] - times[start]) / 1e9 >= IDLE_MIN_S:
                out.append((int(times[start]), int(times[i])))
            start = None
    return out


def register(
    conn: psycopg.Connection[Any],
    job: Job,
    container: dict[str, Any],
    quality: dict[str, Any],
    dims: list[DimStats],
    labels: list[tuple[str, str, int | None, int | None]],
    store: dict[str, Any] | None = None,
) -> bool:
    """Register the container: a new episode, or a new version of a registered one. Returns
    whether anything changed (a redone register changes nothing)."""
    reader = _reader(container, store)
    record = record_from_info(
        reader.info, container["uri"], container["size_bytes"], container["sha256"]
    )
    report = QualityReport(
        [QualityFlag(name, detail) for name, detail in quality["flags"]], quality["report"]
    )
    changed = register_episode(conn, record, report, dims, job.source) or register_version(
        conn, record, report, dims
    )
    _add_labels(conn, record.episode_id, labels)  # replaces its own: idempotent
    return changed


def update(
    conn: psycopg.Connection[Any],
    job: Job,
    quality: dict[str, Any] | None,
    dims: list[DimStats] | None,
    labels: list[tuple[str, str, int | None, int | None]],
) -> bool:
    """Register what ``metadata`` or ``relabel`` computed from the current container, and
    the evaluation results the job carries (``relabel --labels``), in one transaction."""
    report = None
    if quality is not None:
        flags = [QualityFlag(name, detail) for name, detail in quality["flags"]]
        report = QualityReport(flags, quality["report"])
    with conn.transaction():
        update_metadata(conn, job.source.episode_id, job.source.sha256, report, dims)
        _add_labels(conn, job.source.episode_id, labels)
        if job.evaluations:
            write_evaluations(conn, job.source.episode_id, list(job.evaluations), job.run_id)
    return True


def container_of(job: Job) -> dict[str, Any]:
    """The container a ``metadata`` or ``relabel`` job reads (its source)."""
    source = job.source
    return {"uri": source.uri, "size_bytes": source.size_bytes, "sha256": source.sha256}


def _add_labels(
    conn: psycopg.Connection[Any],
    episode_id: str,
    labels: list[tuple[str, str, int | None, int | None]],
) -> None:
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "DELETE FROM episode_labels WHERE episode_id = %s AND author = %s",
            (episode_id, ENRICH_AUTHOR),
        )
        cur.executemany(
            "INSERT INTO episode_labels (episode_id, key, value, start_ns, end_ns, author)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            [(episode_id, k, v, s, e, ENRICH_AUTHOR) for k, v, s, e in labels],
        )


def _with_version(episode: EpisodeData, version: int) -> Any:
    return dataclasses.replace(episode.stamps, pipeline_version=version)


def _reader(container: dict[str, Any], store: dict[str, Any] | None) -> EpisodeReader:
    data = objects.read(container["uri"], store or {})
    return EpisodeReader(io.BytesIO(data), name=container["uri"])


def clean(paths: WorkerPaths, workflow_id: str) -> None:
    """Remove the workflow's step files once its episode registered: decoded streams are
    raw frames, tens to hundreds of MB a recording, and a backfill runs millions. A step
    redone later (``quarry pipeline replay``) makes its input again from the source
    (:func:`decoded_here`, :func:`episode_here`). Idempotent: a workflow recovered after
    this ran runs it again."""
    folder = paths.folder(workflow_id)
    for name in STEP_FILES:
        (folder / name).unlink(missing_ok=True)


def _dump(path: Path, data: object) -> str:
    write_atomic(path, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    return str(path)


def _load(path: str) -> Any:
    with Path(path).open("rb") as stream:
        return pickle.load(stream)  # noqa: S301 - the worker's own step files
