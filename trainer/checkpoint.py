"""Checkpoints with torch.distributed.checkpoint: save (sync or async), commit, retain, load.

Layout: ``<checkpoints>/<run>/step-<step:010d>/`` holds DCP's files; ``COMMITTED.json`` is
written into it last, by rank 0, only once every rank's shards and DCP's metadata are on disk.
A folder without the marker is a partial checkpoint: it is never loaded, and it is deleted once
a newer checkpoint commits or the run restarts. Asynchronous saves stage the state in memory,
then write in a background thread whose collectives run on their own gloo process group, so
they never interleave with the training's collectives on the default group.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save, save

from .config import CheckpointSection
from .errors import CheckpointError
from .marker import COMMIT_NAME as COMMIT_NAME  # re-exported: the marker's name
from .marker import read_marker

log = logging.getLogger(__name__)

METADATA_NAME = ".metadata"
STEP_PREFIX = "step-"


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint: its step, folder and commit record."""

    step: int
    path: Path
    info: dict[str, Any]


class CheckpointStore:
    """The checkpoint folders of one run, under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def step_path(self, step: int) -> Path:
        """Folder of the checkpoint taken after ``step`` optimizer steps."""
        return self.root / f"{STEP_PREFIX}{step:010d}"

    def _step_dirs(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            digits = path.name.removeprefix(STEP_PREFIX)
            if path.is_dir() and path.name.startswith(STEP_PREFIX) and digits.isdigit():
                found.append((int(digits), path))
        return sorted(found)

    def committed(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first (a marker and DCP's metadata must be present)."""
        refs = []
        for step, path in self._step_dirs():
            info = read_marker(path)
            if info is not None and (path / METADATA_NAME).is_file():
                refs.append(CheckpointRef(step, path, info))
        return refs

    def latest(self) -> CheckpointRef | None:
        """The newest complete checkpoint, if any."""
        refs = self.committed()
        return refs[-1] if refs else None

    def commit(self, step: int, info: dict[str, Any]) -> None:
        """Write the commit marker of ``step`` (temp file, fsync, rename, fsync the folder)."""
        path = self.step_path(step)
        if not (path / METADATA_NAME).is_file():
            raise CheckpointError("cannot commit: DCP metadata missing", path=str(path))
        tmp = path / f".{COMMIT_NAME}.tmp"
        with tmp.open("w") as handle:
            json.dump({"step": step, **info}, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path / COMMIT_NAME)
        _fsync_dir(path)

    def prune(self, keep_last: int, *, keep_partial_above: bool = True) -> list[Path]:
        """Delete all but the newest ``keep_last`` complete checkpoints, and stale partials.

        A partial checkpoint older than the newest complete one is stale; newer partials may be
        in progress and are kept unless ``keep_partial_above`` is false (at restart nothing is in
        progress). Returns the folders deleted.
        """
        committed = self.committed()
        keep = {ref.path for ref in committed[-keep_last:]}
        newest = committed[-1].step if committed else -1
        complete = {ref.path for ref in committed}
        removed = []
        for step, path in self._step_dirs():
            stale_complete = path in complete and path not in keep
            stale_partial = path not in complete and (step < newest or not keep_partial_above)
            if stale_complete or stale_partial:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class SaveRecord:
    """One save, as the schedule and goodput see it.

    :param stall_s: seconds training was blocked (waiting for the previous save, staging,
        and for ``sync`` the whole write).
    :param write_s: seconds from the start of the save until it was complete on disk.
    """

    step: int
    mode: str
    stall_s: float
    write_s: float | None = None
    ok: bool = True


@dataclass
class _Pending:
    record: SaveRecord
    future: Future[Any]
    done: threading.Event


class Checkpointer:
    """Saves and loads the run's checkpoints; one per rank.

    :param store: the run's checkpoint folders.
    :param config: mode, retention.
    :param group: the gloo process group DCP coordinates on (dedicated to checkpoints).
    :param coordinator: ``True`` on rank 0, which commits and prunes.
    """

    def __init__(
        self,
        store: CheckpointStore,
        config: CheckpointSection,
        group: dist.ProcessGroup,
        coordinator: bool,
    ) -> None:
        self.store = store
        self.config = config
        self.group = group
        self.coordinator = coordinator
        self._pending: _Pending | None = None
        self.records: list[SaveRecord] = []

    def save(self, step: int, state: dict[str, Any], info: dict[str, Any]) -> SaveRecord:
        """Checkpoint ``state`` as step ``step``; returns the record with its stall time.

        ``info`` goes into the commit marker (it must be JSON-ready).
        """
        started = time.monotonic()
        self.wait()
        path = self.store.step_path(step)
        record = SaveRecord(step=step, mode=self.config.mode, stall_s=0.0)
        if self.config.mode == "sync":
            save(state, checkpoint_id=path, process_group=self.group)
            record.stall_s = record.write_s = time.monotonic() - started
            self._complete(record, info)
        else:
            future = async_save(state, checkpoint_id=path, process_group=self.group)
            if not isinstance(future, Future):
                raise CheckpointError("async_save returned no future", path=str(path))
            record.stall_s = time.monotonic() - started
            done = threading.Event()
            self._pending = _Pending(record, future, done)
            # Commit in the writer thread as soon as the write is complete: no training stall.
            future.add_done_callback(lambda f: self._written(f, record, info, started, done))
        self.records.append(record)
        return record

    def _written(
        self,
        future: Future[Any],
        record: SaveRecord,
        info: dict[str, Any],
        started: float,
        done: threading.Event,
    ) -> None:
        """Runs when an async write ends: record it and commit it (rank 0); never raises."""
        try:
            future.result()
            record.write_s = time.monotonic() - started
            self._complete(record, info)
        except Exception as exc:  # DCP wraps rank failures in CheckpointException
            record.ok = False
            log.warning("checkpoint of step %d failed: %s", record.step, exc)
        finally:
            done.set()

    @property
    def busy(self) -> bool:
        """Whether an async save is still being written or committed."""
        return self._pending is not None and not self._pending.done.is_set()

    def poll(self) -> SaveRecord | None:
        """Forget the pending async save if it is complete (committed); never blocks."""
        if self._pending is None or not self._pending.done.is_set():
            return None
        pending, self._pending = self._pending, None
        return pending.record

    def wait(self) -> SaveRecord | None:
        """Block until the pending async save, if any, is complete and committed."""
        if self._pending is None:
            return None
        self._pending.done.wait()
        return self.poll()

    def _complete(self, record: SaveRecord, info: dict[str, Any]) -> None:
        if not self.coordinator:
            return
        self.store.commit(record.step, {**info, "mode": record.mode, "write_s": record.write_s})
        removed = self.store.prune(self.config.keep_last)
        if removed:
            log.info("pruned checkpoints: %s", ", ".join(p.name for p in removed))

    def load(self, ref: CheckpointRef, state: dict[str, Any]) -> None:
        """Load checkpoint ``ref`` into ``state`` in place (every rank calls this)."""
        try:
            dcp_load(state, checkpoint_id=ref.path, process_group=self.group)
        except Exception as exc:
            raise CheckpointError(f"cannot load checkpoint: {exc}", path=str(ref.path)) from exc
