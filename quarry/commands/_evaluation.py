"""``quarry pipeline run --profile relabel --labels FILE``: a policy evaluation's results file
(:mod:`pipeline.evaluation`, docs/pipeline.md "Evaluation results") turned into one relabel
job per episode, each carrying its results. Everything is checked before anything is
enqueued: every line's fields, each recording's episode, each checkpoint's folder and the
manifest it records, each episode's container; the refusal lists every bad line."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import psycopg

from episodes.foreign import file_sha256, recording_id
from pipeline.errors import ProfileError
from pipeline.evaluation import ResultLine, ResultsError, parse_results, result_record
from pipeline.job import Job
from quarry.errors import BadInputError, StackError
from quarry.settings import Settings
from trainer.marker import MANIFEST_KEY, checkpoint_id, read_marker

#: A checkpoint's ID: ``<run>/step-<step:010d>`` (its folder under the checkpoints folder).
CHECKPOINT_ID = re.compile(r"^[^/\s]+/step-\d{10}$")


def evaluation_jobs(settings: Settings, results: Path, run_id: str, version: int) -> list[Job]:
    """One ``relabel`` job per episode of the results file ``results``, its results attached;
    :class:`~pipeline.evaluation.ResultsError` naming every bad line when any is."""
    try:
        data = results.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadInputError(f"cannot read the results file {results}: {error}") from None
    evaluation_id = hashlib.sha256(data).hexdigest()
    lines = parse_results(text, file=str(results))
    base = results.parent
    problems: list[str] = []
    checkpoints: dict[str, tuple[str, str] | str] = {}
    resolved: list[tuple[ResultLine, str, str, str]] = []  # line, episode, checkpoint, manifest
    for line in lines:
        episode = line.episode or _recording_episode(line, base, problems)
        if line.checkpoint not in checkpoints:
            checkpoints[line.checkpoint] = _checkpoint(line.checkpoint, base, settings)
        found = checkpoints[line.checkpoint]
        if isinstance(found, str):
            problems.append(f"line {line.line}: field 'checkpoint': {found}")
        elif episode is not None:
            resolved.append((line, episode, *found))
    _check_duplicates(resolved, problems)
    sources = _check_database(settings.operational_dsn(), resolved, problems)
    if problems:
        raise ResultsError(
            f"results file {results} refused, nothing enqueued:",
            problems=problems,
        )
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for line, episode, checkpoint, manifest in resolved:
        record = result_record(checkpoint, manifest, line, evaluation_id)
        by_episode.setdefault(episode, []).append(record)
    return [
        Job(run_id, "relabel", sources[episode], version, tuple(records))
        for episode, records in by_episode.items()
    ]


def _recording_episode(line: ResultLine, base: Path, problems: list[str]) -> str | None:
    """The episode of the line's rollout recording: the ID its SHA-256 gives (as ingest)."""
    assert line.recording is not None
    path = Path(line.recording).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        problems.append(f"line {line.line}: field 'recording': no file {path}")
        return None
    try:
        return recording_id(file_sha256(path))
    except OSError as error:
        problems.append(f"line {line.line}: field 'recording': cannot read {path}: {error}")
        return None


def _checkpoint(value: str, base: Path, settings: Settings) -> tuple[str, str] | str:
    """``(checkpoint ID, manifest ID)`` of a checkpoint folder or ID, or what is wrong."""
    path = Path(value).expanduser()
    folder = path if path.is_absolute() else base / path
    if not folder.is_dir():
        if not CHECKPOINT_ID.match(value):
            return (
                f"unknown checkpoint {value!r}: no folder {folder}, and not a checkpoint ID "
                "(<run>/step-<10 digits>)"
            )
        folder = settings.paths.checkpoints / value
        if not folder.is_dir():
            return f"unknown checkpoint {value!r}: no folder {folder}"
    marker = read_marker(folder)
    if marker is None:
        return f"{folder} is not a complete checkpoint (no COMMITTED.json the trainer wrote)"
    manifest = marker.get(MANIFEST_KEY)
    if not isinstance(manifest, str) or not manifest:
        return (
            f"checkpoint {checkpoint_id(folder)} records no training manifest (saved before "
            "checkpoints recorded it, or trained from a manifest file not named by its ID)"
        )
    return checkpoint_id(folder), manifest


def _check_duplicates(
    resolved: list[tuple[ResultLine, str, str, str]], problems: list[str]
) -> None:
    seen: dict[tuple[str, str], int] = {}
    for line, episode, checkpoint, _ in resolved:
        first = seen.setdefault((episode, checkpoint), line.line)
        if first != line.line:
            problems.append(
                f"line {line.line}: episode {episode} has a result of checkpoint {checkpoint} "
                f"on line {first} already"
            )


def _check_database(
    dsn: str, resolved: list[tuple[ResultLine, str, str, str]], problems: list[str]
) -> dict[str, Any]:
    """Each episode's current container (a relabel's source) and each manifest registered;
    what is missing goes to ``problems``."""
    from quarry.commands.pipeline import _source  # the profile's own check of an episode

    sources: dict[str, Any] = {}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            manifests = sorted({manifest for *_, manifest in resolved})
            rows = conn.execute("SELECT id FROM manifests WHERE id = ANY(%s)", (manifests,))
            registered = {str(row[0]) for row in rows.fetchall()}
            for line, episode, checkpoint, manifest in resolved:
                if manifest not in registered:
                    problems.append(
                        f"line {line.line}: field 'checkpoint': checkpoint {checkpoint} was "
                        f"trained on manifest {manifest}, which is not registered here"
                    )
                if episode in sources:
                    continue
                try:
                    sources[episode] = _source(conn, episode, "relabel")
                except ProfileError as error:
                    field = "recording" if line.recording else "episode"
                    problems.append(f"line {line.line}: field {field!r}: {error}")
    except psycopg.OperationalError as error:
        raise StackError(f"operational database unreachable ({error}): run `quarry up`") from None
    return sources
