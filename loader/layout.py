"""The folders a node keeps under its state folder: its manifest copies, its cache, and the
trainer's checkpoints and run records. The embedded stack's state folder is a node's too
(``quarry.stack.paths.StatePaths`` adds the stack's own folders), so each name is defined
here once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeLayout:
    """The layout of one node's state folder under ``root``."""

    root: Path

    @property
    def manifests(self) -> Path:
        """The node's manifest copies, ``<id>.arrow``."""
        return self.root / "manifests"

    @property
    def cache(self) -> Path:
        """The node-local cache of containers."""
        return self.root / "cache"

    @property
    def checkpoints(self) -> Path:
        """Trainer checkpoints, one folder per run."""
        return self.root / "checkpoints"

    @property
    def runs(self) -> Path:
        """Trainer run records (config, progress, samples, failures, metrics, summary)."""
        return self.root / "runs"
