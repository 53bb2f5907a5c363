"""A checkpoint's commit marker, ``COMMITTED.json``: written last into a checkpoint folder by
rank 0 (:meth:`trainer.checkpoint.CheckpointStore.commit`), read here without torch, so that
the command line can name a checkpoint and the manifest it trained on cheaply.

A checkpoint's ID is ``<run>/step-<step:010d>``, its folder's path under the checkpoints
folder (``<state>/checkpoints/``). The marker records the step, time, world size, save mode,
write time, the goodput ledger and, since evaluation results are kept
(docs/pipeline.md, "Evaluation results"), ``manifest_id``: the manifest the run trained on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COMMIT_NAME = "COMMITTED.json"
#: The marker's key for the ID of the manifest the checkpoint was trained on.
MANIFEST_KEY = "manifest_id"


def read_marker(path: Path) -> dict[str, Any] | None:
    """The commit marker of checkpoint folder ``path``; ``None`` when it has none (a partial
    checkpoint, or no checkpoint) or it is not a JSON object."""
    try:
        info = json.loads((path / COMMIT_NAME).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def checkpoint_id(path: Path) -> str:
    """The ID of the checkpoint folder ``path``: ``<run>/<step folder>``."""
    return f"{path.parent.name}/{path.name}"
