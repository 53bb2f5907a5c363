"""``quarry demo``: the whole path, end to end, on the embedded stack."""

from __future__ import annotations

from pathlib import Path

import click

from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.commands.train import trainer_config
from quarry.demo import run_demo, summarize
from trainer.launch import LaunchResult, launch_run


@click.command()
@STATE_DIR
@JSON
@click.option(
    "--episodes",
    type=click.IntRange(1),
    default=24,
    show_default=True,
    help="Synthetic episodes to ingest.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Fleet seed.")
@click.option(
    "--steps", type=click.IntRange(1), default=40, show_default=True, help="Training steps."
)
@click.option(
    "--nproc-per-node",
    "nproc",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Training ranks.",
)
def demo(
    state_dir: Path | None, as_json: bool, episodes: int, seed: int, steps: int, nproc: int
) -> None:
    """Start the stack, ingest a synthetic fleet, curate it by SQL and train on it.

    The stack keeps running afterwards, so you can explore it (`quarry status`); `quarry down`
    stops it.
    """
    settings = build_settings(state_dir)
    log = settings.paths.logs / "train.log"

    def train(manifest_id: str) -> LaunchResult:
        values = {"steps": steps, "launch.nproc_per_node": nproc, "launch.max_restarts": 0}
        return launch_run(trainer_config(settings, manifest_id, None, (), values), log_path=log)

    report = run_demo(
        settings,
        episodes=episodes,
        seed=seed,
        steps=steps,
        nproc=nproc,
        progress=not as_json,
        say=lambda line: click.echo(line, err=as_json),
        train=train,
    )
    emit(report.to_dict(), as_json, "\n" + summarize(report))
    training = report.training
    if training is None or training.exit_code != 0:
        click.echo(f"training failed; see {log}", err=True)
        raise SystemExit(training.exit_code if training else 1)


def register(group: click.Group) -> None:
    group.add_command(demo)
