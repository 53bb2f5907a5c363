"""``python -m trainer``: one training rank, under torchrun or an external launcher.

    python -m trainer --manifest ID --service-url URL --token-file F --state-dir DIR \\
        [--steps N] [--config FILE] [--run-name NAME] [key.path=value ...]
    python -m trainer --manifest-path PATH --state-dir DIR [...]

This is the process's entry point and its one exception boundary: the settings are built here,
the launcher's environment is read here (and only here), and every error becomes an exit code
(see :class:`trainer.errors.ExitCode`) plus a failure record in the run's folder. Rank 0 prints
the end-of-run summary as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from episodes.errors import EpisodeError
from loader.errors import LoaderError, ManifestDeliveryError
from manifests import ManifestError

from .config import TrainerConfig, load_config
from .errors import DataError, ExitCode, ManifestFetchError, TrainerError
from .records import RunRecords, write_json
from .world import World

log = logging.getLogger("trainer")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (flags override ``--config`` and ``key.path=value`` overrides)."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="settings file (JSON or TOML)")
    parser.add_argument("--manifest", help="manifest ID to fetch from the service")
    parser.add_argument("--manifest-path", type=Path, help="local manifest file (no service)")
    parser.add_argument("--service-url", help="the Quarry service, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token")
    parser.add_argument("--state-dir", type=Path, help="the node's state folder")
    parser.add_argument("--steps", type=int, help="optimizer steps in total")
    parser.add_argument("--run-name", help="the run's name (a run of the same name resumes)")
    parser.add_argument("--debug", action="store_true", help="re-raise unexpected errors")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="setting overrides")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace, world: World) -> TrainerConfig:
    """Settings from the file, the overrides and the flags; the run name defaulted."""
    flags = {
        "manifest.id": args.manifest,
        "manifest.path": str(args.manifest_path) if args.manifest_path else None,
        "manifest.service_url": args.service_url,
        "manifest.token_file": str(args.token_file) if args.token_file else None,
        "state_dir": str(args.state_dir) if args.state_dir else None,
        "steps": args.steps,
        "run_name": args.run_name,
    }
    config = load_config(args.config, args.overrides, flags)
    if config.run_name is None:
        config = config.model_copy(update={"run_name": default_run_name(config, world)})
    return config


def default_run_name(config: TrainerConfig, world: World) -> str:
    """The launcher's job ID, else one derived from the manifest (so a rerun resumes)."""
    if world.run_id is not None:
        return world.run_id
    source = config.manifest.id or (config.manifest.path.stem if config.manifest.path else "")
    if not source:
        raise ManifestFetchError("set --manifest or --manifest-path")
    return f"local-{source[:16]}"


def set_determinism(config: TrainerConfig) -> None:
    """Fixed thread counts and, if asked, deterministic algorithms (set before any CUDA use)."""
    torch.set_num_threads(config.threads)
    if config.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def as_trainer_error(exc: Exception, world: World) -> TrainerError:
    """Errors of the other packages mapped onto the trainer's (exit codes included)."""
    if isinstance(exc, TrainerError):
        if exc.rank is None:
            exc.rank = world.rank
        return exc
    if isinstance(exc, ManifestDeliveryError):
        return ManifestFetchError(
            str(exc), rank=world.rank, manifest_id=exc.key, retryable=exc.retryable
        )
    if isinstance(exc, ManifestError):
        return ManifestFetchError(str(exc), rank=world.rank, retryable=exc.retryable)
    if isinstance(exc, LoaderError | EpisodeError):
        return DataError(str(exc), rank=world.rank, retryable=exc.retryable)
    # Unknown (a peer's death surfaces as a gloo RuntimeError): a restart may cure it.
    return TrainerError(f"{type(exc).__name__}: {exc}", rank=world.rank, retryable=True)


def record_failure(config: TrainerConfig | None, world: World, error: TrainerError) -> None:
    """Leave a failure record in the run's folder (read by :func:`trainer.launch.launch`; one
    marked not retryable ends the job without restarts, see :mod:`trainer.supervisor`)."""
    if config is None or config.run_name is None:
        return
    records = RunRecords(config.runs_dir / config.run_name, world.rank, world.restart_count)
    data: dict[str, Any] = {
        **error.to_dict(),
        "attempt": world.restart_count,
        "wall": time.time(),
        "launch": world.launch_id,
    }
    try:
        write_json(records.failure_path(), data)
    except OSError as exc:
        log.warning("cannot write failure record: %s", exc)


def main(argv: list[str] | None = None) -> int:
    """Run one rank; return its exit status."""
    started_wall = psutil.Process().create_time()
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    world = World()
    config: TrainerConfig | None = None
    try:
        world = World.from_environ(os.environ)
        config = build_config(args, world)
        set_determinism(config)
        from .worker import run_worker  # imports torch.distributed machinery

        summary = run_worker(config, world, started_wall)
    except Exception as exc:
        if args.debug and not isinstance(exc, TrainerError):
            raise
        error = as_trainer_error(exc, world)
        record_failure(config, world, error)
        log.error(
            "rank %d failed: %s", world.rank, error, exc_info=not isinstance(exc, TrainerError)
        )
        print(json.dumps({"event": "train_failed", **error.to_dict()}), file=sys.stderr)
        return int(error.exit_code)
    if world.is_coordinator:
        assert config is not None and config.run_name is not None
        write_json(config.runs_dir / config.run_name / "summary.json", summary)
        print(json.dumps(summary), flush=True)
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
