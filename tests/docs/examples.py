"""The runnable examples of the docs: every fenced ```console block of README.md and docs/*.md.

A console block is a bash script, run as written: plain command lines (no ``$`` prompt, no
output; comments with ``#``). Output and anything not meant to run is fenced ```text. The
blocks of one file run in order in one bash session (variables carry from block to block),
from the repository root, with ``set -e -o pipefail``: a block fails at its first failing
command. See docs/README.md, "Examples that run", for what an example may assume.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
_OPEN = re.compile(r"^```console\s*$")
_CLOSE = re.compile(r"^```\s*$")
_MARK = "QUARRY_DOCS_BLOCK"


@dataclass(frozen=True)
class Block:
    """One console block: the file it is in, the line of its opening fence, its script."""

    path: Path
    line: int
    script: str

    @property
    def where(self) -> str:
        """``file:line`` of the opening fence, the file relative to the repository."""
        path = (
            self.path.relative_to(REPO_ROOT) if self.path.is_relative_to(REPO_ROOT) else self.path
        )
        return f"{path}:{self.line}"


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    """README.md and every docs/*.md, in a fixed order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The console blocks of ``path``, in order. An unclosed block is an error."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    start: int | None = None
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if start is None:
            if _OPEN.match(line):
                start, body = number, []
        elif _CLOSE.match(line):
            found.append(Block(path, start, "\n".join(body) + "\n"))
            start = None
        else:
            body.append(line)
    if start is not None:
        raise AssertionError(f"{path}:{start}: the console block is never closed")
    return found


@dataclass(frozen=True)
class Outcome:
    """How a file's blocks ran: the block that failed (``None``: all passed) and the output."""

    failed: Block | None
    returncode: int
    output: str


def run_blocks(
    found: list[Block], env: dict[str, str], timeout_s: float, cwd: Path = REPO_ROOT
) -> Outcome:
    """Run ``found`` in order in one bash session; stop at the first block that fails."""
    parts = ["set -e -o pipefail"]
    for index, block in enumerate(found):
        parts.append(f"echo '{_MARK} {index}' >&2")
        parts.append(block.script)
    parts.append(f"echo '{_MARK} done' >&2")
    result = subprocess.run(
        ["bash", "-c", "\n".join(parts)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    marks = re.findall(rf"^{_MARK} (\S+)$", result.stderr, flags=re.MULTILINE)
    output = result.stdout + re.sub(rf"^{_MARK} \S+\n", "", result.stderr, flags=re.MULTILINE)
    if result.returncode == 0 and marks and marks[-1] == "done":
        return Outcome(None, 0, output)
    last = int(marks[-1]) if marks and marks[-1] != "done" else len(found) - 1
    return Outcome(found[max(last, 0)], result.returncode, output)
