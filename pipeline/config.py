"""The pipeline's settings (section ``pipeline`` of Quarry's settings, ``QUARRY_PIPELINE__*``):
how a run is cut into batches, the queue's limits on how fast and how many batches start, and
how often a step that failed for a passing reason is tried again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .job import StepRetry


class PipelineConfig(BaseModel):
    """Batches and the queue's limits. Every worker registers the queue with the same limits
    (DBOS enforces them across workers, in Postgres)."""

    batch_episodes: int = Field(
        default=8,
        ge=1,
        description="recordings per batch, on average: a run's recordings are split into "
        "ceil(recordings / batch_episodes) batches of about equal cost (bytes and duration; "
        "dearest first, each into the batch cheapest so far), one workflow per batch, one "
        "batch at a time per worker; for a backfill, a few batches per worker; 1: one batch "
        "per recording",
    )
    fixed_cost: float = Field(
        default=0.0,
        ge=0,
        description="a recording's cost whatever its size (its workflow's and steps' records "
        "in Postgres, opening its files), in average recordings' bytes (and duration): the "
        "intercept of a recording's time against its bytes over the mean recording's "
        "bytes-proportional time (benchmarks/ingest.py fits it: about 0.1-0.4 at its small "
        "recordings); raise it when recordings are short",
    )
    queue_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="batches running at once across all workers (DBOS queue `concurrency`); "
        "unset: no bound beyond the workers'",
    )
    worker_concurrency: int = Field(
        default=1,
        ge=1,
        description="batches one worker process runs at once (DBOS `worker_concurrency`); the "
        "steps are the process's CPU, so start more workers rather than raising it",
    )
    starts_per_period: int | None = Field(
        default=20,
        ge=1,
        description="staggered starts: at most this many batches start per "
        "`start_period_s` across all workers (DBOS queue `limiter`), so a run of thousands "
        "of batches does not start them in one burst on Postgres; unset: no rate limit",
    )
    start_period_s: float = Field(
        default=1.0, gt=0, description="the period of `starts_per_period`, seconds"
    )
    synchronous_step_records: bool = Field(
        default=False,
        description="whether a worker's records in DBOS's tables (dequeues, step outputs, "
        "workflow states) wait for the WAL flush at commit; off by default: a killed worker "
        "loses none, a crash of the database server at most the last fraction of a second's, "
        "whose steps then run again (each registration commits synchronously, and a "
        'registration done twice changes nothing; docs/pipeline.md, "What durability costs")',
    )
    polling_interval_s: float = Field(
        default=0.2, gt=0, description="how often an idle worker polls the queue, seconds"
    )

    step_attempts: int = Field(
        default=4,
        ge=1,
        le=20,
        description="attempts of a step that fails with a retryable error (the operational "
        "database unreachable, an OSError or timeout reading the landing area or S3, a "
        "PipelineError or EpisodeError marked retryable), the first included; a terminal error "
        "(a damaged recording) is never retried: its recording parks at once; 1: no retries",
    )
    retry_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=600,
        description="seconds before a step's second attempt; each later wait is "
        "`retry_backoff` times the one before (exponential back-off)",
    )
    retry_backoff: float = Field(
        default=2.0, ge=1, le=10, description="factor between a step's successive waits"
    )

    def step_retry(self) -> StepRetry:
        """The steps' retry policy of these settings."""
        return StepRetry(self.step_attempts, self.retry_interval_s, self.retry_backoff)

    def queue_options(self) -> dict[str, Any]:
        """Keyword arguments of ``DBOS.register_queue`` for these limits."""
        options: dict[str, Any] = {
            "worker_concurrency": self.worker_concurrency,
            "polling_interval_sec": self.polling_interval_s,
        }
        if self.queue_concurrency is not None:
            options["concurrency"] = self.queue_concurrency
        if self.starts_per_period is not None:
            options["limiter"] = {"limit": self.starts_per_period, "period": self.start_period_s}
        return options
