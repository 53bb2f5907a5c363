"""The whole path on the embedded stack: up, ingest, CDC, curate, train, summarize.

``quarry demo`` runs it; the end-to-end test runs the same steps one by one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from cdc.status import read_status
from episodes.ingest import IngestResult, ingest_synth
from quarry.client import ServiceClient
from quarry.errors import StackError
from quarry.progress import Progress
from quarry.settings import Settings
from quarry.stack.lifecycle import Stack
from trainer.launch import LaunchResult
from warehouse.backends import open_warehouse

DEMO_CURATION = "SELECT * FROM episodes WHERE success AND len(quality_flags) = 0"


@dataclass
class DemoReport:
    """What each step of the demo did, for the closing summary."""

    episodes: int = 0
    new_episodes: int = 0
    hours: float = 0.0
    bytes: int = 0
    visible_after_s: float | None = None
    cdc_lag_s: float | None = None
    curation: dict[str, Any] = field(default_factory=dict)
    training: LaunchResult | None = None

    def to_dict(self) -> dict[str, Any]:
        training = self.training
        return {
            "episodes": self.episodes,
            "new_episodes": self.new_episodes,
            "hours": round(self.hours, 4),
            "bytes": self.bytes,
            "warehouse_visible_after_s": self.visible_after_s,
            "cdc_lag_s": self.cdc_lag_s,
            "manifest_id": self.curation.get("manifest_id"),
            "manifest_rows": self.curation.get("rows"),
            "manifest_samples": self.curation.get("samples"),
            "training": None
            if training is None
            else {
                "exit_code": training.exit_code,
                "run_name": training.run_name,
                "summary": training.summary,
            },
        }


def ingest(
    settings: Settings, count: int, seed: int, progress: bool, report: DemoReport
) -> list[IngestResult]:
    """Generate and register the synthetic fleet; fill the ingest figures of ``report``."""
    with (
        psycopg.connect(settings.operational_dsn(), autocommit=True) as conn,
        Progress("ingest", "episodes", enabled=progress) as hook,
    ):
        results = ingest_synth(conn, settings.paths.objects, count, seed, progress=hook)
        ids = [r.episode_id for r in results]
        row = conn.execute(
            "SELECT coalesce(sum(end_ns - start_ns), 0) FROM episodes WHERE id = ANY(%s::uuid[])",
            (ids,),
        ).fetchone()
    report.episodes = len(results)
    report.new_episodes = sum(r.created for r in results)
    report.hours = float(row[0] if row else 0) / 3.6e12
    report.bytes = sum(r.size_bytes for r in results)
    return results


def wait_for_warehouse(
    settings: Settings, episode_ids: list[str], report: DemoReport, timeout_s: float = 120.0
) -> None:
    """Wait until CDC has mirrored every ingested episode into the warehouse."""
    started = time.monotonic()
    wanted = len(set(episode_ids))
    with open_warehouse(settings.warehouse_config()) as warehouse:
        while time.monotonic() - started < timeout_s:
            found = warehouse.query_arrow("SELECT count(*) AS n FROM episodes")["n"][0].as_py()
            if found >= wanted:
                report.visible_after_s = round(time.monotonic() - started, 3)
                status = read_status(settings.paths.cdc_status)
                report.cdc_lag_s = status.lag_s if status else None
                return
            time.sleep(0.2)
    raise StackError(
        f"the warehouse did not show {wanted} episodes within {timeout_s:.0f} s; "
        "see `quarry cdc status`"
    )


def curate(settings: Settings, sql: str, report: DemoReport) -> dict[str, Any]:
    result: dict[str, Any] = ServiceClient.for_state(settings).post_json(
        "/v1/curations", {"sql": sql}
    )
    report.curation = result
    return result


def run_demo(
    settings: Settings,
    *,
    episodes: int,
    seed: int,
    steps: int,
    nproc: int,
    progress: bool,
    say: Callable[[str], None],
    train: Callable[[str], LaunchResult],
) -> DemoReport:
    """Every step of the demo, in order; ``train`` runs the trainer on a manifest ID."""
    report = DemoReport()
    say("1/5 starting the embedded stack (Postgres, DuckLake, CDC, service)")
    Stack(settings).up()
    say(f"2/5 ingesting {episodes} synthetic episodes")
    results = ingest(settings, episodes, seed, progress, report)
    say("3/5 waiting for CDC to mirror them into the warehouse")
    wait_for_warehouse(settings, [r.episode_id for r in results], report)
    say(f"4/5 curating: {DEMO_CURATION}")
    manifest = curate(settings, DEMO_CURATION, report)
    say(f"5/5 training {steps} steps on {nproc} ranks (torchrun, gloo)")
    report.training = train(manifest["manifest_id"])
    return report


def summarize(report: DemoReport) -> str:
    """The closing summary, a few aligned lines."""
    summary = (report.training.summary if report.training else None) or {}
    cache = summary.get("cache") or {}
    warmed = ((summary.get("preflight") or {}).get("cache") or {}).get("fetched", "-")
    lines = [
        f"episodes ingested  {report.episodes} ({report.new_episodes} new), "
        f"{report.hours:.2f} h of recordings, {report.bytes / 1e6:.1f} MB",
        f"warehouse          visible after {report.visible_after_s} s, CDC lag "
        f"{_seconds(report.cdc_lag_s)}",
        f"manifest           {report.curation.get('manifest_id')} "
        f"({report.curation.get('rows')} rows, {report.curation.get('samples')} samples)",
        f"cache              {warmed} objects warmed before training, then "
        f"{cache.get('hits', '-')} hits, {cache.get('misses', '-')} misses",
        f"training           {summary.get('steps', '-')} steps, "
        f"{summary.get('steps_per_s', '-')} steps/s, loss {summary.get('first_loss_mean', '-')}"
        f" -> {summary.get('last_loss_mean', '-')}",
    ]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
