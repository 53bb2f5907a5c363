"""``quarry train``: launch the trainer with torchrun on a manifest from the running service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from quarry.client import manifest_source, node_manifest, resolve_manifest
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.settings import Settings
from trainer.config import TrainerConfig, load_config
from trainer.launch import LaunchResult, launch_run, with_run_name


def trainer_config(
    settings: Settings,
    manifest_id: str,
    config_file: Path | None,
    overrides: tuple[str, ...],
    values: dict[str, Any],
) -> TrainerConfig:
    """The trainer's settings: file, ``--set`` overrides, then flags; the manifest comes from
    this state folder's service, authenticated with its local admin token (the source
    ``quarry cache warm`` uses, into the same ``<state>/manifests``)."""
    source = manifest_source(settings, manifest_id)
    base = {
        "state_dir": str(settings.paths.root),
        "manifest.id": source.id,
        "manifest.service_url": source.service_url,
        "manifest.token_file": str(source.token_file),
    }
    return load_config(config_file, overrides, {**base, **values})


def describe(result: LaunchResult) -> str:
    summary = result.summary or {}
    if result.exit_code != 0:
        how = " at once (not retryable)" if result.stopped else ""
        why = f": {failure_text(result.failure)}" if result.failure else ""
        return (
            f"training run {result.run_name} failed{how} with exit status {result.exit_code}"
            f"{why}; records in {result.run_dir}"
        )
    return (
        f"run {result.run_name}: {summary.get('steps')} steps, "
        f"{summary.get('steps_per_s')} steps/s, loss {summary.get('first_loss_mean')} -> "
        f"{summary.get('last_loss_mean')}, goodput {summary.get('goodput_fraction')}"
    )


def failure_text(record: dict[str, Any]) -> str:
    """A rank's failure record in a few words: its error, message, check and rank."""
    where = [f"{k} {record[k]}" for k in ("check", "rank") if record.get(k) is not None]
    return f"{record.get('message')}" + (f" ({', '.join(where)})" if where else "")


@click.command()
@STATE_DIR
@JSON
@click.option(
    "--manifest",
    "manifest_id",
    required=True,
    help="Manifest ID (or a unique prefix of 8+ hex digits) to train on.",
)
@click.option("--steps", type=click.IntRange(0), default=None, help="Optimizer steps.")
@click.option("--nnodes", default=None, help="Nodes, or an elastic range MIN:MAX.")
@click.option(
    "--nproc-per-node",
    type=click.IntRange(1),
    default=None,
    help="Worker processes per node (default 2).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(0),
    default=None,
    help="Worker-group restarts before the job fails.",
)
@click.option("--run-name", default=None, help="Name of the run (resumes it if it exists).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Trainer settings file (TOML or JSON).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a setting, e.g. --set optim.lr=3e-4 (repeatable).",
)
def train(
    state_dir: Path | None,
    as_json: bool,
    manifest_id: str,
    steps: int | None,
    nnodes: str | None,
    nproc_per_node: int | None,
    max_restarts: int | None,
    run_name: str | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Train the policy on a manifest with torchrun (gloo on CPU, NCCL on CUDA)."""
    values = {
        "steps": steps,
        "launch.nnodes": nnodes,
        "launch.nproc_per_node": nproc_per_node,
        "launch.max_restarts": max_restarts,
        "run_name": run_name,
    }
    settings = build_settings(state_dir)
    manifest_id = resolve_manifest(settings, manifest_id)
    # The manifest onto the node first (the trainer's ranks then find it there, verified): an
    # unknown ID is a clear error here, not a torchrun restart loop.
    node_manifest(settings, manifest_id)
    config = trainer_config(settings, manifest_id, config_file, overrides, values)
    if config.run_name is None and config.launch.nnodes != "1":
        raise click.UsageError(
            "a job on several nodes needs --run-name: every node's command must name the same "
            "run so that their agents meet"
        )
    config = with_run_name(config)
    # With --json, stdout carries only the result; torchrun's output goes to a log file.
    log = settings.paths.logs / f"train-{config.run_name}.log" if as_json else None
    result = launch_run(config, log_path=log)
    emit(
        {
            "exit_code": result.exit_code,
            "run_name": result.run_name,
            "run_dir": str(result.run_dir),
            "summary": result.summary,
            "failure": result.failure,
            "stopped": result.stopped,
        },
        as_json,
        describe(result),
    )
    if result.exit_code != 0:
        raise SystemExit(result.exit_code)


def register(group: click.Group) -> None:
    group.add_command(train)
