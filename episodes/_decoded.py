"""H.264 decoding that carries over from one sample to the next (one run per camera).

A sample's frames decode from the last keyframe at/before its oldest frame. When the next
sample of the same camera needs later frames of the same stretch (consecutive anchors, as a
block-shuffled order serves them), the run goes on from where it stopped instead of
decoding from the keyframe again; frames it decoded lately are kept (as decoded YUV frames,
converted to RGB only when a sample asks for them), so a sample that needs them again costs
no decoding. A sample outside the run starts a new one: the cost is then what a fresh
decode costs. Memory: at most ``KEEP_FRAMES`` decoded frames per camera (about 1.5 bytes a
pixel each), plus one decoder context per camera.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

import av
import numpy as np
import numpy.typing as npt

from . import messages as msg
from ._h264 import rgb_array
from .errors import DecodeError

#: Decoded frames kept per camera (the most recent ones of its run).
KEEP_FRAMES = 8

_Frame = tuple[msg.FrameHeader, bytes]


class _Run:
    """One decoder going forward through a camera's frames from a keyframe."""

    def __init__(self, first: int) -> None:
        self.ctx = av.CodecContext.create("h264", "r")
        self.ctx.thread_count = 1
        self.first = first  # frame index of the keyframe the run started at
        self.last_fed: int | None = None  # frame index of the last access unit fed
        self.pending: deque[int] = deque()  # frame indices fed whose pictures are not out yet
        self.ended = False  # flushed: it cannot take more units
        self.kept: OrderedDict[int, av.VideoFrame] = OrderedDict()
        self.keep = KEEP_FRAMES  # at least the span of the frames one sample asks for

    @property
    def next_out(self) -> int:
        """Frame index the next decoded picture belongs to."""
        if self.pending:
            return self.pending[0]
        return self.first if self.last_fed is None else self.last_fed + 1

    def reaches(self, index: int, positions: dict[int, int]) -> bool:
        """Whether feeding on from here gets to frame ``index`` with the units at hand."""
        return not self.ended and self.next_out <= index and self.last_fed in positions

    def start(self, positions: dict[int, int]) -> int:
        """Position in the sample's frames of the next unit to feed."""
        if self.last_fed is None:
            return positions[self.first]
        return positions[self.last_fed] + 1

    def feed(self, frames: Sequence[_Frame], start: int, until: int, topic: str) -> None:
        """Feed ``frames[start:]`` until frame index ``until`` came out (flush at the end)."""
        position = start
        try:
            while self.next_out <= until and position < len(frames):
                header, unit = frames[position]
                self.pending.append(header.index)
                self.last_fed = header.index
                self._take(self.ctx.decode(av.Packet(unit)))
                position += 1
            if self.next_out <= until:
                self._take(self.ctx.decode(None))
                self.ended = True
        except av.FFmpegError as exc:
            self.ended = True
            raise DecodeError(f"H.264 decode failed: {exc}", topic=topic) from exc

    def _take(self, pictures: list[av.VideoFrame]) -> None:
        for picture in pictures:
            if not self.pending:
                raise DecodeError("the decoder gave more pictures than units")
            self.kept[self.pending.popleft()] = picture
            while len(self.kept) > self.keep:
                self.kept.popitem(last=False)


class RunDecoder:
    """Per-camera decoding runs of one episode reader (not shared between processes)."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def decode(
        self, topic: str, frames: Sequence[_Frame], picks: Sequence[int]
    ) -> list[npt.NDArray[np.uint8]]:
        """RGB frames ``frames[p]`` for ``p`` in ``picks``; ``frames`` sorted by frame index
        and holding a keyframe at/before the oldest pick.

        :raises DecodeError: no keyframe before the frames, or FFmpeg failed.
        """
        wanted = [frames[p][0].index for p in picks]
        run = self._runs.get(topic)
        missing = [i for i in wanted if run is None or i not in run.kept]
        if missing:  # decode up to the newest wanted frame: a new run keeps none of the old
            span = max(wanted) - min(wanted) + 1
            run = self._advance(topic, run, frames, min(missing), max(wanted), span)
        assert run is not None
        out = []
        for index in wanted:
            picture = run.kept.get(index)
            if picture is None:
                raise DecodeError(f"frame {index} did not decode", topic=topic)
            out.append(rgb_array(picture))
        return out

    def _advance(
        self,
        topic: str,
        run: _Run | None,
        frames: Sequence[_Frame],
        lo: int,
        hi: int,
        span: int,
    ) -> _Run:
        """The run that holds frames ``lo`` to ``hi`` (and ``span`` frames back from ``hi``)."""
        positions = {header.index: k for k, (header, _) in enumerate(frames)}
        if run is None or not run.reaches(lo, positions):
            first = positions[lo]
            keys = [k for k in range(first + 1) if frames[k][0].keyframe]
            if not keys:
                raise DecodeError("no keyframe before the frame", topic=topic)
            run = _Run(frames[keys[-1]][0].index)
            self._runs[topic] = run
        run.keep = max(KEEP_FRAMES, span)
        try:
            run.feed(frames, run.start(positions), hi, topic)
        except DecodeError:
            del self._runs[topic]
            raise
        return run
