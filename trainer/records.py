"""A run's records on disk, besides its checkpoints: ``<state dir>/runs/<run name>/``.

```
config.json             the settings the workers were started with (mode 0600)
progress.json           rank 0's heartbeat: attempt, step, Unix time, run start
samples/rank-<r>.jsonl  per step: attempt, step, sample indices (with record_samples)
faults/attempt-<k>.json an injected fault: rank, step, Unix time
failures/rank-<r>-attempt-<k>.json  why a rank exited non-zero
metrics/rank-<r>.prom   Prometheus text files
summary.json            the end-of-run summary (the JSON line rank 0 prints)
```
Small JSON files are replaced atomically (temp file and rename).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any


def write_json(path: Path, data: Any, mode: int | None = None) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per process and thread: several launchers of one job (the agents of a multi-node
    # job on a shared filesystem, or in one process) write the same config.json at once.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w") as handle:
        if mode is not None:
            tmp.chmod(mode)
        json.dump(data, handle, sort_keys=True)
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class RunRecords:
    """The record files of one run, as seen by one rank.

    :param root: the run's folder. :param rank: this rank. :param attempt: restart count.
    """

    def __init__(self, root: Path, rank: int, attempt: int) -> None:
        self.root = root
        self.rank = rank
        self.attempt = attempt
        self._samples: IO[str] | None = None

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def progress_path(self) -> Path:
        return self.root / "progress.json"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"

    @property
    def samples_path(self) -> Path:
        return self.root / "samples" / f"rank-{self.rank}.jsonl"

    def fault_path(self, attempt: int) -> Path:
        return self.root / "faults" / f"attempt-{attempt}.json"

    def failure_path(self) -> Path:
        return self.root / "failures" / f"rank-{self.rank}-attempt-{self.attempt}.json"

    def write_progress(self, step: int, wall: float, run_started_wall: float) -> None:
        """Rank 0's heartbeat (dates a failure that left no other trace)."""
        data = {
            "attempt": self.attempt,
            "step": step,
            "wall": wall,
            "run_started": run_started_wall,
        }
        write_json(self.progress_path, data)

    def read_progress(self) -> dict[str, Any] | None:
        """The last heartbeat, if any."""
        data = read_json(self.progress_path)
        return data if isinstance(data, dict) else None

    def read_fault(self, attempt: int) -> dict[str, Any] | None:
        """The injected-fault record of ``attempt``, if there is one."""
        data = read_json(self.fault_path(attempt))
        return data if isinstance(data, dict) else None

    def record_samples(self, step: int, samples: list[int]) -> None:
        """Append one step's sample indices (flushed, so a killed rank leaves them behind)."""
        if self._samples is None:
            self.samples_path.parent.mkdir(parents=True, exist_ok=True)
            self._samples = self.samples_path.open("a")
        line = {"attempt": self.attempt, "step": step, "samples": samples}
        self._samples.write(json.dumps(line) + "\n")
        self._samples.flush()

    def close(self) -> None:
        """Close the sample log."""
        if self._samples is not None:
            self._samples.close()
            self._samples = None


def failure_records(root: Path) -> list[dict[str, Any]]:
    """Every failure record of the run at ``root``, oldest first."""
    folder = root / "failures"
    if not folder.is_dir():
        return []
    found = [read_json(path) for path in folder.glob("*.json")]
    records = [r for r in found if isinstance(r, dict)]
    return sorted(records, key=lambda r: float(r.get("wall", 0.0)))
