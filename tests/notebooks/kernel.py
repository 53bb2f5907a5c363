"""Runs a notebook the way Jupyter does, in a kernel of this virtualenv's Python.

The kernelspec is written into a temporary folder and used by name from there only, so a
``python3`` kernel installed elsewhere on the machine (or none at all) changes nothing; the
kernel's IPython and matplotlib folders are temporary too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat import NotebookNode

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
KERNEL_NAME = "quarry-test-venv"
CELL_TIMEOUT_S = 300
PROBE_MARK = "QUARRY-PROBE "


def read_notebook(name: str) -> NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def install_kernelspec(folder: Path) -> Path:
    """A kernelspec named ``KERNEL_NAME`` that starts ipykernel on ``sys.executable``."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "quarry venv (tests)", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return spec.parent


def kernel_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without Quarry settings, plus ``extra`` and private
    IPython/matplotlib folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    env.update(IPYTHONDIR=str(scratch / "ipython"), MPLCONFIGDIR=str(scratch / "matplotlib"))
    env.update(extra)
    return env


def parameters(notebook: NotebookNode) -> dict[str, Any]:
    """The values the notebook's ``parameters`` cell assigns (it only assigns constants)."""
    values: dict[str, Any] = {}
    exec(_parameters_cell(notebook).source, values)
    return {k: v for k, v in values.items() if not k.startswith("__")}


def _parameters_cell(notebook: NotebookNode) -> NotebookNode:
    return next(
        cell for cell in notebook.cells if "parameters" in cell.get("metadata", {}).get("tags", [])
    )


def inject_parameters(notebook: NotebookNode, source: str) -> None:
    """Add a cell after the one tagged ``parameters``, as papermill does."""
    index = notebook.cells.index(_parameters_cell(notebook))
    cell = nbformat.v4.new_code_cell(source)
    cell.id = "injected-parameters"
    notebook.cells.insert(index + 1, cell)


def append_probe(notebook: NotebookNode, expression: str) -> None:
    """Add a last cell that prints ``expression`` (a dict of the notebook's variables) as a
    JSON line for :func:`probe_output`."""
    source = f"import json\nprint({PROBE_MARK!r} + json.dumps({expression}, default=str))"
    cell = nbformat.v4.new_code_cell(source)
    cell.id = "test-probe"
    notebook.cells.append(cell)


def execute(notebook: NotebookNode, scratch: Path, cwd: Path, env: dict[str, str]) -> None:
    """Execute every cell in a fresh kernel started in ``cwd``; raises on a failing cell."""
    manager = AsyncKernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(install_kernelspec(scratch))]),
        connection_file=str(scratch / "connection.json"),
    )
    client = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT_S, allow_errors=False)
    client.execute(cwd=str(cwd), env=kernel_env(scratch, env))


def probe_output(notebook: NotebookNode) -> dict[str, Any]:
    """What the probe cell printed."""
    cell = next(c for c in notebook.cells if c.get("id") == "test-probe")
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    line = next(line for line in text.splitlines() if line.startswith(PROBE_MARK))
    return dict(json.loads(line.removeprefix(PROBE_MARK)))


def cell_outputs(notebook: NotebookNode, marker: str) -> list[NotebookNode]:
    """Outputs of the code cells whose source contains ``marker``."""
    return [
        output
        for cell in notebook.cells
        if cell.cell_type == "code" and marker in cell.source
        for output in cell.outputs
    ]
