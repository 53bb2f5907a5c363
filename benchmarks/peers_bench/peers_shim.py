"""Loaded at start-up of every interpreter of the peer venv (via `peers_shim.pth`).

torchvision's wheels on PyPI are CUDA builds: their compiled `_C.so` needs `libtorch_cuda.so`,
which the CPU torch of this project lacks, so the extension does not load. torchvision then
still registers fake kernels for `torchvision::nms` and `torchvision::qnms` at import
(`torchvision/_meta_registrations.py`, unconditionally), which fails with "operator
torchvision::nms does not exist". Defining those two schemas first lets torchvision import
(its transforms, which lerobot uses, are pure Python); the compiled operators stay absent.

The schemas are defined lazily, the first time anything imports torchvision, so that an
interpreter that never imports it (pip, for one) does not pay for importing torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

# From torchvision/csrc/ops/nms.cpp and qnms (the `m.def(...)` lines of torchvision 0.28).
SCHEMAS = {
    "torchvision::nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def define_schemas() -> None:
    """Define each torchvision operator schema that torch does not know yet."""
    import torch

    for qualname, schema in SCHEMAS.items():
        namespace, name = qualname.split("::")
        try:
            getattr(getattr(torch.ops, namespace), name)
        except (AttributeError, RuntimeError):
            torch.library.define(qualname, schema)


class TorchvisionHook(importlib.abc.MetaPathFinder):
    """Defines the schemas just before torchvision is first imported, then steps aside."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            define_schemas()
        return None


def install() -> None:
    """Put the hook first on `sys.meta_path` (once)."""
    if not any(isinstance(f, TorchvisionHook) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchvisionHook())
