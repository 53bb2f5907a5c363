"""``quarry pipeline run`` (enqueue a run; ``runs``, ``show``, ``replay`` and ``cancel`` are
in ``_pipeline_ops``) and ``quarry worker`` (run the recordings' workflows): ingestion as DBOS
durable workflows (docs/pipeline.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import psycopg

from episodes.episode import PIPELINE_VERSION
from episodes.errors import EpisodeError
from episodes.foreign import file_sha256, land_recording, recording_id
from episodes.mapping import Mapping, load_mapping
from episodes.registry import SourceRecord
from episodes.versions import current_container, source_of
from pipeline.errors import PipelineError, ProfileError
from pipeline.job import FROM_CONTAINER, PROFILES, STEPS, Job, WorkerContext, WorkerPaths
from quarry.client import ServiceClient
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.commands._where import selected_episodes
from quarry.commands.episodes import service_error
from quarry.commands.ingest import _recordings
from quarry.errors import BadInputError, StackError
from quarry.settings import Settings


@click.group()
def pipeline() -> None:
    """Run recordings through the ingest pipeline's durable workflows."""


@pipeline.command()
@STATE_DIR
@JSON
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--profile", type=click.Choice(sorted(PROFILES)), required=True, help="Run profile.")
@click.option(
    "--episode",
    "episode_ids",
    multiple=True,
    help="An episode to process (profiles reprocess, metadata, relabel). Repeatable.",
)
@click.option(
    "--where",
    "predicate",
    help="Process the live episodes this SQL condition over the `episodes` view selects, "
    'e.g. "pipeline_version < 3" (the curation guard checks it; needs `quarry up`).',
)
@click.option("--robot", help="Robot id of the recordings (profile full; overrides the mapping).")
@click.option("--task", help="Task id of the recordings (profile full; overrides the mapping).")
@click.option(
    "--mapping",
    "mapping_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Topic roles, fields, rates and stamps of the recordings (profile full).",
)
@click.option(
    "--pipeline-version",
    type=click.IntRange(0, None),
    default=PIPELINE_VERSION,
    show_default=True,
    help="Stamp the run writes on the episodes it processes.",
)
@click.option(
    "--labels",
    "results_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Profile relabel: a policy evaluation's per-episode results (JSON Lines: episode or "
    "recording, checkpoint, success, scores), written as labels and evaluations.",
)
@click.option("--wait", is_flag=True, help="Follow the run; exit 2 if a recording failed.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="--wait's limit, s.")
def run(
    state_dir: Path | None,
    as_json: bool,
    paths: tuple[Path, ...],
    profile: str,
    episode_ids: tuple[str, ...],
    predicate: str | None,
    mapping_file: Path | None,
    pipeline_version: int,
    results_file: Path | None,
    wait: bool,
    timeout: float,
    **overrides: Any,
) -> None:
    """Enqueue a run: one durable workflow per recording (profile full: the MCAP files
    given, copied into the landing area; reprocess: the episodes given by --episode or
    selected by --where, from their source recordings; metadata: QC, statistics and labels
    again from their current containers; relabel: labels only, or with --labels a policy
    evaluation's results as labels and evaluations). `quarry worker` runs them; the run
    ID is printed. An episode the profile cannot take refuses the whole run before it starts."""
    from pipeline.runs import enqueue_run, new_run_id, wait_run  # loads DBOS: only here

    settings = build_settings(state_dir)
    dsn = settings.operational_dsn()
    run_id = new_run_id()
    try:
        if results_file is not None:
            from quarry.commands._evaluation import evaluation_jobs

            if profile != "relabel" or paths or episode_ids or predicate:
                raise BadInputError("--labels goes with --profile relabel alone")
            jobs = evaluation_jobs(settings, results_file, run_id, pipeline_version)
        elif profile == "full":
            mapping = (load_mapping(mapping_file) if mapping_file else Mapping()).with_overrides(
                **overrides
            )
            jobs = _landed_jobs(settings, paths, mapping, run_id, pipeline_version)
        else:
            if predicate is not None:
                client = ServiceClient.for_state(settings)
                episode_ids += tuple(selected_episodes(client, predicate))
                if not episode_ids:
                    raise BadInputError(f"no live episode matches --where {predicate!r}")
            jobs = _reprocess_jobs(dsn, episode_ids, run_id, pipeline_version, bool(paths), profile)
        selection = {
            "paths": [str(p.resolve()) for p in paths],
            "episodes": list(episode_ids),
            "where": predicate,
            "labels": str(results_file.resolve()) if results_file else None,
        }
        workflows = enqueue_run(
            dsn,
            jobs,
            settings.pipeline.batch_episodes,
            settings.pipeline.fixed_cost,
            {k: v for k, v in selection.items() if v},
        )
    except (EpisodeError, PipelineError) as error:
        raise _cli_error(error) from error
    if not wait:
        emit({"run_id": run_id, "workflows": workflows}, as_json, run_id)
        return
    _report(wait_run(dsn, run_id, timeout), as_json)


@click.command()
@STATE_DIR
@click.option(
    "--executor-id",
    default="local",
    show_default=True,
    help="DBOS executor ID: give each worker its own, and restart a worker with its ID so it "
    "recovers its unfinished workflows.",
)
@click.option(
    "--pause-before",
    type=click.Choice(STEPS),
    help="Debugging: wait at the start of this step while --pause-file exists.",
)
@click.option("--pause-file", type=click.Path(path_type=Path), help="See --pause-before.")
@click.option(
    "--fail-before",
    type=click.Choice(STEPS),
    help="Debugging: this step fails at its start while --fail-file exists (a terminal "
    "error, the recording parks; a retryable one when the file says `retryable`).",
)
@click.option("--fail-file", type=click.Path(path_type=Path), help="See --fail-before.")
def worker(
    state_dir: Path | None,
    executor_id: str,
    pause_before: str | None,
    pause_file: Path | None,
    fail_before: str | None,
    fail_file: Path | None,
) -> None:
    """Run the ingest pipeline's workflows until SIGTERM; on start, resume the workflows this
    executor left unfinished at the step each was in."""
    from pipeline.worker import run_worker  # loads DBOS: only here
    from service.manifest_files import storage_options

    settings = build_settings(state_dir)
    section = settings.pipeline
    paths = WorkerPaths(
        settings.paths.objects,
        settings.paths.pipeline_work,
        section.objects_url,
        storage_options(section.s3) if section.objects_url else {},
    )
    context = WorkerContext(
        paths,
        settings.operational_dsn(),
        pause_before,
        pause_file,
        section.step_retry(),
        fail_before,
        fail_file,
    )
    run_worker(context, executor_id, settings.pipeline)


def _landed_jobs(
    settings: Settings, paths: tuple[Path, ...], mapping: Mapping, run_id: str, version: int
) -> list[Job]:
    """The recordings landed (in S3 too, with ``pipeline.objects_url``: the workers may be
    on other machines), one job each."""
    if not paths:
        raise BadInputError("profile full takes the recordings to ingest: give their paths")
    url = settings.pipeline.objects_url
    jobs = []
    for path in _recordings(paths):
        digest = file_sha256(path)
        eid = recording_id(digest)
        source = land_recording(settings.paths.objects, path, digest, eid, mapping)
        if url is not None:
            from pipeline.objects import landing_key, put_file
            from service.manifest_files import storage_options

            uri = url.rstrip("/") + "/" + landing_key(digest)
            put_file(
                uri, Path(source.uri.removeprefix("file://")), storage_options(settings.pipeline.s3)
            )
            source = dataclasses.replace(source, uri=uri)
        jobs.append(Job(run_id, "full", source, version))
    _check_identity(mapping)
    return jobs


def _check_identity(mapping: Mapping) -> None:
    for key in ("robot", "task"):
        if not getattr(mapping, key):
            raise BadInputError(f"no {key} given: pass --{key} or set {key} in the mapping")


def _reprocess_jobs(
    dsn: str,
    episode_ids: tuple[str, ...],
    run_id: str,
    version: int,
    has_paths: bool,
    profile: str = "reprocess",
) -> list[Job]:
    if has_paths or not episode_ids:
        raise BadInputError(f"profile {profile} takes --episode IDs or --where, not paths")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            sources = [_source(conn, eid, profile) for eid in episode_ids]
    except psycopg.OperationalError as error:
        raise StackError(f"operational database unreachable ({error}): run `quarry up`") from None
    except psycopg.errors.InvalidTextRepresentation:
        raise BadInputError("an --episode is not an episode ID (a UUID)") from None
    return [Job(run_id, profile, source, version) for source in sources]


def _source(conn: psycopg.Connection[Any], episode_id: str, profile: str) -> SourceRecord:
    """What the profile reads of the episode; refused (before the run) when it has none."""
    if profile in FROM_CONTAINER:
        found = current_container(conn, episode_id)
        if found is None:
            raise ProfileError("no such episode", episode=episode_id)
        local = found.uri.removeprefix("file://")
        if found.uri.startswith("file://") and not Path(local).is_file():
            raise ProfileError(
                f"profile {profile} reads the episode's container, and its file is missing",
                episode=episode_id,
                file=local,
            )
        return found
    source = source_of(conn, episode_id)
    if source is None:
        raise ProfileError(
            "episode has no recorded source to reprocess from (registered before sources "
            "were kept, or unknown)",
            episode=episode_id,
        )
    return source


def _cli_error(error: EpisodeError | PipelineError) -> Exception:
    if isinstance(error, EpisodeError):
        return service_error(error)
    if error.retryable:
        return StackError(str(error))
    return BadInputError(str(error))


def _report(state: Any, as_json: bool, fail: bool = True) -> None:
    summary = {
        "run_id": state.run_id,
        "finished": state.finished,
        "counts": state.counts(),
        "failed": state.failed,
        "errors": state.errors,
    }
    counts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(summary["counts"].items()))
    lines = [f"{state.run_id}: {counts}"] + [
        f"FAILED {wid} at {e['step']}: {e['error']}: {e['message']}"
        for wid, e in sorted(state.errors.items())
    ]
    emit(summary, as_json, "\n".join(lines))
    if fail and state.failed:
        raise BadInputError(f"{len(state.failed)} recordings failed; first: {state.failed[0]}")
    if fail and not state.finished:
        raise StackError(f"run {state.run_id} not finished in time (is `quarry worker` running?)")


def register(group: click.Group) -> None:
    from quarry.commands._pipeline_ops import cancel, replay, runs, show
    from quarry.commands._pipeline_watch import watch

    for command in (runs, show, replay, cancel, watch):
        pipeline.add_command(command)
    group.add_command(pipeline)
    group.add_command(worker)
