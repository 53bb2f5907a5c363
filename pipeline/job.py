"""What one workflow processes: a recording (its source) under a profile, and where the
worker keeps the step's intermediate files."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from episodes.registry import SourceRecord

#: The steps of a recording's workflow, in order.
STEPS = ("fetch", "decode", "transform", "encode", "qc", "stats", "enrich", "register")
#: Run profiles and the steps each runs (docs/pipeline.md): ``full`` and ``reprocess`` from a
#: source, ``metadata`` (QC, statistics, labels) and ``relabel`` (labels) from the current
#: container, which they never re-encode.
PROFILES = {
    "full": STEPS,
    "reprocess": STEPS,
    "metadata": ("fetch", "qc", "stats", "enrich", "register"),
    "relabel": ("fetch", "enrich", "register"),
}
#: The profiles that read the episode's current container instead of its source.
FROM_CONTAINER = ("metadata", "relabel")


@dataclass(frozen=True)
class Job:
    """One recording to process: ``source`` (where it lies, how to read it), the ``profile``,
    the ``run_id`` it belongs to and the ``pipeline_version`` stamp it writes."""

    run_id: str
    profile: str
    source: SourceRecord
    pipeline_version: int
    #: Results of policy evaluations on this episode (profile ``relabel`` with ``--labels``:
    #: :func:`pipeline.evaluation.result_record`), written by its register step.
    evaluations: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "source": asdict(self.source)}
        data["evaluations"] = [dict(e) for e in self.evaluations]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        return cls(
            data["run_id"],
            data["profile"],
            SourceRecord(**data["source"]),
            int(data["pipeline_version"]),
            tuple(dict(e) for e in data.get("evaluations", ())),
        )

    @property
    def workflow_id(self) -> str:
        """The workflow's ID: one per (run, episode), so enqueueing twice runs it once."""
        return f"{self.run_id}:{self.source.episode_id}"


@dataclass(frozen=True)
class WorkerPaths:
    """Where a worker writes: containers under ``objects`` (or, with ``objects_url``, an S3
    prefix every worker reaches, with s3fs's ``storage_options``), step files under ``work``
    (this machine's: a step whose file is missing recomputes it from the source)."""

    objects: Path
    work: Path
    objects_url: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False)

    def folder(self, workflow_id: str) -> Path:
        """The step files of one workflow (the bulky ones removed once it registered:
        :func:`pipeline.steps.clean`; its ``steps.log`` kept)."""
        path = self.work / workflow_id.replace(":", "_")
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class StepRetry:
    """How a step that fails with a retryable error is tried again: ``attempts`` in all, the
    first wait ``interval_s`` seconds, each next one ``backoff`` times longer."""

    attempts: int = 4
    interval_s: float = 1.0
    backoff: float = 2.0


@dataclass
class WorkerContext:
    """What the steps of this process need: paths, the operational DSN, the retry policy, a
    pause point and an injected failure (debugging and tests: ``quarry worker --help``)."""

    paths: WorkerPaths
    dsn: str
    pause_before: str | None = None
    pause_file: Path | None = None
    retry: StepRetry = field(default_factory=StepRetry)
    fail_before: str | None = None
    fail_file: Path | None = None
