"""Progress of a long command on stderr: a live bar on a terminal, plain lines otherwise.

The libraries report progress through a hook, ``progress(done, total)`` (units of their
choosing: episodes, files, bytes); they never print. A :class:`Progress` is such a hook. On a
terminal it draws a tqdm bar; into a file or a pipe (CI logs, ``2> log``) it writes one line
at most every :data:`LINE_EVERY_S` seconds and one at the end, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from tqdm import tqdm

LINE_EVERY_S = 5.0


class Progress:
    """A progress hook labelled ``what`` counting ``unit`` (``"B"`` is shown scaled)."""

    def __init__(self, what: str, unit: str, *, enabled: bool = True, out: TextIO | None = None):
        self._what, self._unit, self._enabled = what, unit, enabled
        self._out = out if out is not None else sys.stderr
        self._bar: tqdm[None] | None = None
        self._last_line: float | None = None  # monotonic() counts from boot: no 0.0 here
        self._state: tuple[int, int] | None = None
        self._printed: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            return
        self._state = (done, total)
        if self._out.isatty():
            self._draw(done, total)
        elif self._last_line is None or time.monotonic() - self._last_line >= LINE_EVERY_S:
            self._line(done, total)

    def _draw(self, done: int, total: int) -> None:
        if self._bar is None:
            scaled = self._unit == "B"
            self._bar = tqdm(
                total=total, desc=self._what, unit=self._unit, unit_scale=scaled, file=self._out
            )
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def _line(self, done: int, total: int) -> None:
        self._last_line = time.monotonic()
        self._printed = (done, total)
        share = f" ({done / total:.0%})" if total else ""
        print(
            f"{self._what}: {_amount(done, self._unit)} of {_amount(total, self._unit)}{share}",
            file=self._out,
            flush=True,
        )

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._state is not None and self._state != self._printed:
            self._line(*self._state)  # the final count, unless it was the last line written


def _amount(value: int, unit: str) -> str:
    if unit != "B":
        return f"{value} {unit}"
    size = float(value)
    for name in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {name}" if name == "B" else f"{size:.1f} {name}"
        size /= 1000
    return f"{size:.1f} TB"
