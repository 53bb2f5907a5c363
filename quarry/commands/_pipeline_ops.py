"""``quarry pipeline runs|show|replay|cancel``: operating runs (docs/pipeline.md,
"Operations"): list them, follow one's progress and failures, rerun failed recordings from a
step, cancel what has not finished."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import psycopg

from pipeline.errors import PipelineError
from pipeline.job import STEPS
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit, table
from quarry.errors import BadInputError, StackError


@click.command()
@STATE_DIR
@JSON
@click.option(
    "--limit", type=click.IntRange(1, None), default=20, show_default=True, help="Runs listed."
)
def runs(state_dir: Path | None, as_json: bool, limit: int) -> None:
    """The newest runs first: profile, created, recordings by state, done of total, and
    whether each finished."""
    from pipeline.progress import list_runs, summarize

    with _connect(build_settings(state_dir).operational_dsn()) as conn:
        found = [summarize(run, counts) for run, counts in list_runs(conn, limit)]
    rows = [
        [
            r["run_id"],
            r["profile"],
            (r["created_at"] or "")[:19],
            f"{r['done']}/{r['recordings']}",
            ", ".join(f"{k.lower()} {v}" for k, v in r["counts"].items()),
            "yes" if r["finished"] else "no",
        ]
        for r in found
    ]
    headers = ["run", "profile", "created", "done", "recordings", "finished"]
    emit({"runs": found}, as_json, table(headers, rows) if found else "no runs")


@click.command()
@STATE_DIR
@JSON
@click.argument("run_id")
def show(state_dir: Path | None, as_json: bool, run_id: str) -> None:
    """A run's workflows by status, its progress (recordings and episode-hours done, how
    many finished each step, rate and ETA) and its failures (step, error, recording)."""
    from pipeline.operations import replays, run_report  # loads DBOS: only here

    dsn = build_settings(state_dir).operational_dsn()
    try:
        report = run_report(dsn, run_id)
        with _connect(dsn) as conn:
            replayed = replays(conn, run_id)
    except PipelineError as error:
        raise BadInputError(str(error)) from None
    summary = report.to_dict() | {"replays": replayed}
    emit(summary, as_json, show_text(summary))


def show_text(summary: dict[str, Any]) -> str:
    """``show``'s text: the counts line, progress, steps, failures."""
    counts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(summary["counts"].items()))
    planned = summary["planned_episode_hours"]
    hours = f"{summary['episode_hours_done']:.3f}" + (f"/{planned:.3f}" if planned else "")
    rate, eta = summary["recordings_per_hour"], summary["eta_s"]
    pace = "finished" if summary["finished"] else "running"
    if rate is not None:
        pace += f", {rate:.0f} recordings/h" + (f", ETA {eta:.0f} s" if eta is not None else "")
    lines = [
        f"{summary['run_id']}: {counts}",
        f"profile {summary['profile']}: {summary['done']}/{summary['recordings']} recordings "
        f"done, {hours} episode-hours; {pace}",
        "steps: " + ", ".join(f"{s['step']} {s['done']}" for s in summary["steps"]),
    ]
    lines += [f"replayed {r['workflow_id']} from {r['from']}" for r in summary["replays"]]
    lines += [
        f"FAILED {wid} at {e['step']}: {e['error']}: {e['message']}"
        for wid, e in sorted(summary["errors"].items())
    ]
    return "\n".join(lines)


@click.command()
@STATE_DIR
@JSON
@click.argument("run_id")
@click.option(
    "--from",
    "from_step",
    type=click.Choice(STEPS),
    required=True,
    help="Rerun from this step; the steps before it keep their recorded outputs.",
)
@click.option(
    "--episode",
    "episode_ids",
    multiple=True,
    help="A recording of the run to replay, by episode ID (default: every failed or "
    "cancelled one). Repeatable.",
)
def replay(
    state_dir: Path | None, as_json: bool, run_id: str, from_step: str, episode_ids: tuple[str, ...]
) -> None:
    """Rerun a run's failed recordings (or those given) from a step, under their own
    workflow IDs; `quarry worker` runs them and `show` follows them. Refused, with nothing
    changed, for a step the run's profile does not run, a recording still running, or one
    that never reached the step."""
    from pipeline.operations import replay_run  # loads DBOS: only here

    try:
        plan = replay_run(
            build_settings(state_dir).operational_dsn(), run_id, from_step, episode_ids
        )
    except PipelineError as error:
        raise BadInputError(str(error)) from None
    text = "\n".join(f"replaying {p['workflow_id']} from {p['from']}" for p in plan)
    emit({"run_id": run_id, "replayed": plan}, as_json, text)


@click.command()
@STATE_DIR
@JSON
@click.argument("run_id")
def cancel(state_dir: Path | None, as_json: bool, run_id: str) -> None:
    """Cancel a run's batches and recordings still pending or enqueued (a recording in the
    middle of a step stops at its next step); finished ones are left as they are."""
    from pipeline.operations import cancel_run  # loads DBOS: only here

    try:
        ids = cancel_run(build_settings(state_dir).operational_dsn(), run_id)
    except PipelineError as error:
        raise BadInputError(str(error)) from None
    emit({"run_id": run_id, "cancelled": ids}, as_json, f"{run_id}: cancelled {len(ids)} workflows")


def _connect(dsn: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as error:
        raise StackError(f"operational database unreachable ({error}): run `quarry up`") from None
