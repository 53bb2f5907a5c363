"""Results of a policy evaluation as labels and lineage (docs/pipeline.md, "Evaluation
results"): the results file's format and its checks, and what the ``relabel`` profile's
register step writes for a job that carries results.

The file is JSON Lines, one object per evaluated episode (blank lines are skipped)::

    {"episode": "6f1c...", "checkpoint": "pick-v3/step-0000000400", "success": false,
     "scores": {"progress": 0.4, "time_s": 12.5}}
    {"recording": "rollouts/0007.mcap", "checkpoint": "/runs/ckpt/pick-v3/step-0000000400",
     "success": true}

``episode`` (an episode ID) or ``recording`` (the rollout's recording file, whose SHA-256
names its episode as ingest names it), exactly one; ``checkpoint``: a checkpoint folder the
trainer wrote, or its ID ``<run>/step-<step:010d>``; ``success``: ``true`` or ``false``;
``scores``: an object of names to finite numbers (optional). Any other field is refused. The
command line resolves recordings and checkpoints (:mod:`quarry.commands._evaluation`); this
module only reads the lines, so it needs neither the trainer nor the files.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .errors import ProfileError

#: The fields of a results line; ``scores`` is optional, one of ``episode``/``recording``.
FIELDS = ("episode", "recording", "checkpoint", "success", "scores")
#: Labels written for a checkpoint's results carry this author prefix and the checkpoint's ID;
#: a later result of the same checkpoint replaces them.
AUTHOR_PREFIX = "evaluation:"
#: The label keys: the rollout's outcome, and one per score.
SUCCESS_KEY = "evaluation.success"
SCORE_KEY_PREFIX = "evaluation.score."
#: At most this many bad lines are listed in the error (the count says how many in all).
MAX_LISTED = 20


@dataclass(frozen=True)
class ResultLine:
    """One checked line of a results file (``line`` counts from 1)."""

    line: int
    checkpoint: str
    success: bool
    episode: str | None = None
    recording: str | None = None
    scores: dict[str, float] = field(default_factory=dict)


class ResultsError(ProfileError):
    """A results file that cannot be taken: every bad line, with its number and field."""

    def __init__(self, message: str, *, problems: list[str] | None = None, **context: Any):
        self.problems = list(problems or [])
        listed = self.problems[:MAX_LISTED]
        more = len(self.problems) - len(listed)
        text = " ".join([message, "; ".join(listed)])  # one line, as the CLI prints errors
        if more > 0:
            text += f"; and {more} more"
        super().__init__(text, **context)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_results, (self.message, self.context))


def _rebuild_results(message: str, context: dict[str, Any]) -> ResultsError:
    error = ResultsError.__new__(ResultsError)
    ProfileError.__init__(error, message, **context)
    error.problems = []
    return error


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_results(text: str, *, file: str = "") -> list[ResultLine]:
    """Every line of the results ``text`` checked; :class:`ResultsError` listing each bad
    line (``line N: field F: ...``) when any is bad, so that nothing is written from a file
    with one bad line."""
    problems: list[str] = []
    out: list[ResultLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw, parse_constant=_no_constant)
        except json.JSONDecodeError as error:
            problems.append(f"line {number}: not JSON ({error.msg} at column {error.colno})")
            continue
        except ValueError as error:  # NaN, Infinity
            problems.append(f"line {number}: not a JSON object ({error})")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {number}: not a JSON object")
            continue
        found, errors = _check_line(number, data)
        problems += errors
        if found is not None:
            out.append(found)
    if not out and not problems:
        problems.append("no results: the file has no lines")
    if problems:
        raise ResultsError(
            f"results file {file or '<input>'} refused, nothing written:", problems=problems
        )
    return out


def _check_line(number: int, data: dict[str, Any]) -> tuple[ResultLine | None, list[str]]:
    where = f"line {number}"
    errors = [
        f"{where}: field {name!r}: unknown field (fields: {', '.join(FIELDS)})"
        for name in data
        if name not in FIELDS
    ]
    episode, recording = data.get("episode"), data.get("recording")
    if (episode is None) == (recording is None):
        errors.append(f"{where}: field 'episode' or 'recording': give exactly one of them")
    if episode is not None:
        if not isinstance(episode, str):
            errors.append(f"{where}: field 'episode': expected an episode ID (a UUID string)")
        else:
            try:
                episode = str(uuid.UUID(episode))
            except ValueError:
                errors.append(f"{where}: field 'episode': {episode!r} is not an episode ID")
    if recording is not None and (not isinstance(recording, str) or not recording):
        errors.append(f"{where}: field 'recording': expected the recording's path (a string)")
    checkpoint = data.get("checkpoint")
    if not isinstance(checkpoint, str) or not checkpoint:
        errors.append(f"{where}: field 'checkpoint': expected a checkpoint folder or ID (a string)")
    success = data.get("success")
    if not isinstance(success, bool):
        errors.append(f"{where}: field 'success': expected true or false, got {success!r}")
    scores = data.get("scores", {})
    if not isinstance(scores, dict):
        errors.append(f"{where}: field 'scores': expected an object of names to numbers")
        scores = {}
    for name, value in scores.items():
        if not name:
            errors.append(f"{where}: field 'scores': a score has an empty name")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{where}: field 'scores.{name}': expected a number, got {value!r}")
        elif not math.isfinite(value):
            errors.append(f"{where}: field 'scores.{name}': expected a finite number")
    if errors:
        return None, errors
    assert isinstance(checkpoint, str) and isinstance(success, bool)
    return ResultLine(number, checkpoint, success, episode, recording, dict(scores)), []


def result_record(
    checkpoint_id: str, manifest_id: str, line: ResultLine, evaluation_id: str
) -> dict[str, Any]:
    """What a job carries of one result (:attr:`pipeline.job.Job.evaluations`)."""
    return {
        "checkpoint_id": checkpoint_id,
        "manifest_id": manifest_id,
        "success": line.success,
        "scores": dict(line.scores),
        "evaluation_id": evaluation_id,
    }


def evaluation_labels(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The labels of one result: its outcome and each score (``key``, ``value``)."""
    labels = [(SUCCESS_KEY, "true" if record["success"] else "false")]
    labels += [(SCORE_KEY_PREFIX + k, json.dumps(v)) for k, v in sorted(record["scores"].items())]
    return labels


def write_evaluations(
    conn: psycopg.Connection[Any], episode_id: str, records: list[dict[str, Any]], run_id: str
) -> None:
    """Write each result on the episode: its labels (replacing that checkpoint's earlier
    ones, author ``evaluation:<checkpoint>``) and its ``episode_evaluations`` row (replacing
    an earlier result of that checkpoint on the episode), in one transaction. Safe to redo:
    the same results change nothing."""
    with conn.transaction(), conn.cursor() as cur:
        for record in records:
            author = AUTHOR_PREFIX + record["checkpoint_id"]
            cur.execute(
                "DELETE FROM episode_labels WHERE episode_id = %s AND author = %s",
                (episode_id, author),
            )
            cur.executemany(
                "INSERT INTO episode_labels (episode_id, key, value, author)"
                " VALUES (%s, %s, %s, %s)",
                [(episode_id, k, v, author) for k, v in evaluation_labels(record)],
            )
            cur.execute(
                "INSERT INTO episode_evaluations (checkpoint_id, episode_id, manifest_id,"
                " success, scores, evaluation_id, run_id) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (checkpoint_id, episode_id) DO UPDATE SET"
                " manifest_id = EXCLUDED.manifest_id, success = EXCLUDED.success,"
                " scores = EXCLUDED.scores, evaluation_id = EXCLUDED.evaluation_id,"
                " run_id = EXCLUDED.run_id, created_at = now()"
                " WHERE (episode_evaluations.manifest_id, episode_evaluations.success,"
                " episode_evaluations.scores, episode_evaluations.evaluation_id)"
                " IS DISTINCT FROM (EXCLUDED.manifest_id, EXCLUDED.success, EXCLUDED.scores,"
                " EXCLUDED.evaluation_id)",
                (
                    record["checkpoint_id"],
                    episode_id,
                    record["manifest_id"],
                    record["success"],
                    Jsonb(record["scores"]),
                    record["evaluation_id"],
                    run_id,
                ),
            )
