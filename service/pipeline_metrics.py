"""Prometheus metrics of the ingest pipeline, judged from Postgres at every scrape (one query,
:func:`pipeline.progress.pipeline_totals`): workflows by kind and state, recordings and
episode-hours done, and each unfinished run's progress. A database where no run was ever
enqueued (no pipeline schema yet) has zeros; one that cannot be read says so in
``quarry_pipeline_up`` and never fails ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.progress import RunTotals

#: Workflow states always exported (0 when none), so a dashboard's series exist from the start.
STATES = ("ENQUEUED", "PENDING", "SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


class PipelineCollector(Collector):
    """Reads the pipeline's totals at each scrape; ``read`` returns them or raises."""

    def __init__(self, read: Callable[[], list[RunTotals]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "quarry_pipeline_up", "1 when the pipeline's state was read from Postgres"
        )
        try:
            runs = self._read()
        except psycopg.Error:  # reported in quarry_pipeline_up; /metrics stays up
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from _totals(runs)
        yield from _unfinished(runs)


def _totals(runs: list[RunTotals]) -> Iterator[Metric]:
    workflows = GaugeMetricFamily(
        "quarry_pipeline_workflows",
        "Pipeline workflows by kind (batch, recording) and state, every run",
        labels=["kind", "state"],
    )
    counts: dict[tuple[str, str], int] = {
        (kind, state): 0 for kind in ("batch", "recording") for state in STATES
    }
    for run in runs:
        for key, n in run.workflows.items():
            counts[key] = counts.get(key, 0) + n
    for (kind, state), n in sorted(counts.items()):
        workflows.add_metric([kind, state], float(n))
    yield workflows
    done = sum(run.recordings_in("SUCCESS") for run in runs)
    yield GaugeMetricFamily(
        "quarry_pipeline_episodes_done",
        "Recordings registered by the pipeline (workflows that succeeded), every run",
        value=float(done),
    )
    yield GaugeMetricFamily(
        "quarry_pipeline_episode_hours_done",
        "Hours of the episodes the pipeline registered, every run",
        value=sum(run.episode_s for run in runs) / 3600,
    )


def _unfinished(runs: list[RunTotals]) -> Iterator[Metric]:
    active = [run for run in runs if not run.finished]
    planned = GaugeMetricFamily(
        "quarry_pipeline_run_recordings",
        "Recordings of each unfinished run (its record's; else those with a workflow)",
        labels=["run"],
    )
    done = GaugeMetricFamily(
        "quarry_pipeline_run_recordings_done",
        "Recordings of each unfinished run that succeeded",
        labels=["run"],
    )
    failed = GaugeMetricFamily(
        "quarry_pipeline_run_recordings_failed",
        "Recordings of each unfinished run that failed and are parked (ERROR)",
        labels=["run"],
    )
    hours = GaugeMetricFamily(
        "quarry_pipeline_run_episode_hours_done",
        "Hours of the episodes each unfinished run registered",
        labels=["run"],
    )
    for run in active:
        reached = sum(n for (kind, _), n in run.workflows.items() if kind == "recording")
        planned.add_metric([run.run_id], float(run.recordings or reached))
        done.add_metric([run.run_id], float(run.recordings_in("SUCCESS")))
        failed.add_metric([run.run_id], float(run.recordings_in("ERROR")))
        hours.add_metric([run.run_id], run.episode_s / 3600)
    yield from (planned, done, failed, hours)
