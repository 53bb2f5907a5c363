"""``quarry pipeline watch LANDING_DIR``: the collection case. Each new recording in the
landing folder starts a run of its own (profile ``full``, one recording, one batch), as
``quarry pipeline run --profile full FILE`` would; the workers process it.

- A file is taken once it is settled: its size and modification time the same at two scans
  and the modification time at least ``--settle`` seconds old. Dotfiles and anything under a
  dotted folder, and names that do not end in ``.mcap`` (``*.mcap.partial`` included), are
  never taken: writers that can should write ``NAME.mcap.partial`` (or ``.NAME.mcap``) and
  rename it when done.
- The run's ID is ``watch-<episode>``, the episode being the recording's (the uuid5 of its
  SHA-256), so its workflows are ``watch-<episode>/batch-0`` and ``watch-<episode>:<episode>``:
  a restarted watch (or the same bytes under another name) finds the run already there and
  starts nothing; a file whose bytes change is a new recording.
- A damaged recording fails its own run's workflow (at ``decode``) and the watch goes on; a
  file that cannot be read is reported and skipped.
- ``--once`` takes what is in the folder (waiting for files still settling) and exits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from episodes.episode import PIPELINE_VERSION
from episodes.errors import EpisodeError
from episodes.mapping import Mapping, load_mapping
from pipeline.errors import PipelineError
from pipeline.job import Job
from quarry.commands._common import JSON, STATE_DIR, build_settings
from quarry.errors import QuarryError
from quarry.settings import Settings

log = logging.getLogger(__name__)

#: The suffix of the recordings a watch takes.
SUFFIX = ".mcap"
#: The run ID prefix of a watched recording's run.
RUN_PREFIX = "watch-"


@dataclasses.dataclass
class Watcher:
    """The landing folder's files: what each looked like at the last scan, and which are
    taken (at which size and modification time)."""

    folder: Path
    settle_s: float
    seen: dict[Path, tuple[int, int]] = dataclasses.field(default_factory=dict)
    taken: dict[Path, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def scan(self, now: float | None = None) -> tuple[list[Path], int]:
        """The settled files not taken yet, and how many others are still settling."""
        now = time.time() if now is None else now
        ready, settling = [], 0
        current: dict[Path, tuple[int, int]] = {}
        for path in sorted(self.folder.rglob(f"*{SUFFIX}")):
            relative = path.relative_to(self.folder)
            if any(part.startswith(".") for part in relative.parts):
                continue
            try:
                stat = path.stat()
            except OSError:  # gone (renamed, deleted) between the listing and now
                continue
            if not path.is_file():
                continue
            look = (stat.st_size, stat.st_mtime_ns)
            current[path] = look
            if self.taken.get(path) == look:
                continue
            if self.seen.get(path) == look and now - stat.st_mtime >= self.settle_s:
                ready.append(path)
            else:
                settling += 1
        self.seen = current
        return ready, settling


def watched_run_id(episode_id: str) -> str:
    """The run ID of a watched recording: from its episode (its bytes), so never two."""
    return RUN_PREFIX + episode_id


@click.command()
@STATE_DIR
@JSON
@click.argument("landing_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--profile",
    type=click.Choice(["full"]),
    default="full",
    show_default=True,
    help="Run profile of each new recording (a new recording is processed whole).",
)
@click.option("--robot", help="Robot id of the recordings (overrides the mapping).")
@click.option("--task", help="Task id of the recordings (overrides the mapping).")
@click.option(
    "--mapping",
    "mapping_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Topic roles, fields, rates and stamps of the recordings.",
)
@click.option(
    "--pipeline-version",
    type=click.IntRange(0, None),
    default=PIPELINE_VERSION,
    show_default=True,
    help="Stamp the runs write on the episodes they make.",
)
@click.option(
    "--settle",
    "settle_s",
    type=click.FloatRange(0, None),
    default=2.0,
    show_default=True,
    help="Take a file once its size and modification time have been still this long, s.",
)
@click.option(
    "--poll",
    "poll_s",
    type=click.FloatRange(0.01, None),
    default=1.0,
    show_default=True,
    help="How often the folder is scanned, s.",
)
@click.option("--once", is_flag=True, help="Take the recordings there now, then exit.")
def watch(
    state_dir: Path | None,
    as_json: bool,
    landing_dir: Path,
    profile: str,
    mapping_file: Path | None,
    pipeline_version: int,
    settle_s: float,
    poll_s: float,
    once: bool,
    **overrides: Any,
) -> None:
    """Start a one-recording run (profile full) for each new recording (*.mcap) in
    LANDING_DIR, until SIGTERM (or, with --once, for those there now). One line per recording
    taken (with --json, a JSON object per line: file, episode_id, run_id, status started,
    already or error). A file is taken once settled (--settle); dotfiles and *.partial are
    never taken. Restarting never processes a recording twice: its run's ID comes from its
    bytes. `quarry worker` runs the runs; `quarry pipeline show watch-<episode>` follows one."""
    from pipeline.engine import migrate_system  # loads DBOS: only here
    from quarry.commands.pipeline import _check_identity

    settings = build_settings(state_dir)
    mapping = (load_mapping(mapping_file) if mapping_file else Mapping()).with_overrides(
        **overrides
    )
    _check_identity(mapping)
    migrate_system(settings.operational_dsn())
    stop = threading.Event()
    if not once:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    watcher = Watcher(landing_dir, settle_s)
    if not once:
        click.echo(f"watching {landing_dir} (settle {settle_s:g} s); SIGTERM stops", err=True)
    while not stop.is_set():
        ready, settling = watcher.scan()
        for path in ready:
            report = take(settings, path, mapping, pipeline_version)
            watcher.taken[path] = watcher.seen[path]
            _emit(report, as_json)
        if once and not ready and not settling:
            return
        if not ready:
            stop.wait(poll_s)


def take(settings: Settings, path: Path, mapping: Mapping, version: int) -> dict[str, Any]:
    """Land one recording and enqueue its run, unless its run exists already: what was done
    (``status`` ``started``, ``already`` or ``error``)."""
    from quarry.commands.pipeline import _landed_jobs

    report: dict[str, Any] = {"file": str(path)}
    try:
        (job,) = _landed_jobs(settings, (path,), mapping, RUN_PREFIX, version)
        job = dataclasses.replace(job, run_id=watched_run_id(job.source.episode_id))
        report |= {"episode_id": job.source.episode_id, "run_id": job.run_id}
        report["status"] = "started" if _enqueue(settings.operational_dsn(), job) else "already"
    except (EpisodeError, PipelineError, QuarryError, OSError) as error:
        report |= {"status": "error", "error": str(error)}
    return report


def _enqueue(dsn: str, job: Job) -> bool:
    """Enqueue the recording's one-job batch; ``False`` when its run was enqueued before
    (DBOS would attach to it anyway: the check only tells the two apart)."""
    import psycopg
    from dbos import EnqueueOptions

    from pipeline.progress import record_run
    from pipeline.runs import batch_id, client, run_record
    from pipeline.workflow import APP_VERSION, BATCH_WORKFLOW_NAME, QUEUE_NAME

    dbos = client(dsn)
    try:
        workflow_id = batch_id(job.run_id, 0)
        if dbos.list_workflows(workflow_ids=[workflow_id], load_input=False, load_output=False):
            return False
        with psycopg.connect(dsn, autocommit=True) as conn:
            record_run(conn, run_record([[job]], {"watch": job.source.uri}))
        options: EnqueueOptions = {
            "workflow_name": BATCH_WORKFLOW_NAME,
            "queue_name": QUEUE_NAME,
            "workflow_id": workflow_id,
            "app_version": APP_VERSION,
        }
        dbos.enqueue(options, [job.to_dict()])
        return True
    finally:
        dbos.destroy()


def _emit(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    elif report["status"] == "error":
        click.echo(f"error {report['file']}: {report['error']}", err=True)
    else:
        click.echo(f"{report['status']} {report['run_id']} {report['file']}")
    sys.stdout.flush()  # a watch's output is read as it comes (a pipe is block-buffered)
