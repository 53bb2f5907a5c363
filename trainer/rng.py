"""Random-number generator state: seeding, and capture/restore as tensors for checkpoints.

States are kept as tensors (not pickled objects) so a checkpoint loads with
``torch.load(weights_only=True)`` semantics and stays inspectable.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from torch import Tensor


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's (CPU and every CUDA device) global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Tensor]:
    """This process's generator states: torch CPU (and current CUDA device), numpy, Python."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    if kind != "MT19937":
        raise ValueError(f"unexpected numpy generator {kind}")
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_meta": torch.tensor([pos, has_gauss, cached], dtype=torch.float64),
        "python_state": torch.tensor(internal, dtype=torch.int64),
        "python_meta": torch.tensor(
            [version, math.nan if gauss_next is None else gauss_next], dtype=torch.float64
        ),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Tensor]) -> None:
    """Restore the states :func:`capture_rng` returned."""
    torch.set_rng_state(state["torch"].to(torch.uint8))
    pos, has_gauss, cached = state["numpy_meta"].tolist()
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, int(pos), int(has_gauss), float(cached)))
    version, gauss_next = state["python_meta"].tolist()
    internal = tuple(int(v) for v in state["python_state"].tolist())
    random.setstate((int(version), internal, None if math.isnan(gauss_next) else gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].to(torch.uint8))
