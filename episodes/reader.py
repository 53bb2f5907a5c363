"""Read samples and whole topics from a container, one whole chunk per read, counting chunks."""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import fsspec
import numpy as np
import numpy.typing as npt
from mcap.records import Message

from . import messages as msg
from ._decoded import RunDecoder
from ._h264 import decode_h264
from ._index import (
    ChunkRef,
    LoadedChunk,
    Source,
    close_runs,
    read_chunk,
    read_chunks,
    read_metadata,
    read_summary,
)
from ._jpeg import decode_jpeg
from .episode import ACTIONS
from .errors import (
    ContainerError,
    DecodeError,
    RangeError,
    SchemaError,
    SourceError,
    SpecError,
    TopicError,
)
from .info import METADATA_NAME, ContainerInfo, TopicInfo, parse_info
from .sample import Sample, frame_picks, grid, hold, interpolate
from .spec import SampleSpec

_Frame = tuple[msg.FrameHeader, bytes]
#: One camera's frames of a sample: (frames, H, W, 3) uint8, their times (ns), their validity.
_Picked = tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.bool_]]


class EpisodeReader:
    """Reads one container through its chunk index, never the whole file.

    :param source: a path, a ``file://`` or fsspec URI, or a seekable binary file object
        (e.g. an fsspec file opened with ``cache_type="none"``), which the caller keeps open.
    :param name: how errors name the container; defaults to the path or URI.
    :param keep_chunks: keep the chunks one sample read for the next one, which reads them
        again without I/O, CRC or decompression when it needs them (consecutive anchors of a
        block order share their window's chunks); memory: one sample's chunks. Off, every
        sample reads its chunks afresh (what the container benchmark counts).
    :param decode_pool: decodes a sample's cameras side by side in this pool's threads (FFmpeg
        releases the GIL while it decodes) while the calling thread reads the state and
        actions; ``None`` decodes them one after another in the calling thread.
    :param plan_reads: plan a sample's chunks before reading any and read those lying
        together in one request (:meth:`_plan`); off, each chunk is a request of its own,
        read when the sample asks for it (the container benchmark compares layouts so too).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | IO[bytes],
        *,
        name: str | None = None,
        keep_chunks: bool = False,
        decode_pool: Executor | None = None,
        plan_reads: bool = True,
    ) -> None:
        stream, self._owned, default = _open(source)
        self.name = name or default
        self._src = Source(stream, self.name)
        try:
            summary = read_summary(self._src)
            meta = read_metadata(self._src, summary, METADATA_NAME)
            self.info: ContainerInfo = parse_info(summary, meta, self.name)
        except BaseException:
            self.close()
            raise
        #: chunks read so far, counted inside the reader.
        self.chunk_reads = 0
        #: seconds spent fetching and parsing chunks (I/O, CRC, decompression, message records).
        self.fetch_seconds = 0.0
        self._refs = {t: self.info.chunks_with(t) for t in self.info.topics}
        self._context_refs = {
            t: self.info.chunks_with(t, context=True)
            for t, info in self.info.topics.items()
            if info.context_channel_id is not None
        }
        self._context_starts = {
            t: [r.start_ns for r in refs] for t, refs in self._context_refs.items()
        }
        self._starts = {t: [r.start_ns for r in refs] for t, refs in self._refs.items()}
        self._window_refs = {
            t: self.info.chunks_with(t, window=True)
            for t, info in self.info.topics.items()
            if info.window_channel_id is not None
        }
        self._window_starts = {
            t: [r.start_ns for r in refs] for t, refs in self._window_refs.items()
        }
        span = self.info.end_ns - self.info.start_ns
        self._last_window = max(0, -(-span // self.info.window_ns) - 1)
        # Decoding runs carried from one sample to the next (consecutive anchors of a block
        # order go on decoding instead of starting at the keyframe again).
        self._runs = RunDecoder()
        self._keep_chunks, self._pool, self._plan_reads = keep_chunks, decode_pool, plan_reads
        self._kept: dict[int, LoadedChunk] = {}

    def close(self) -> None:
        """Close the file if this reader opened it."""
        if self._owned:
            self._src.stream.close()

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def requests(self) -> int:
        """Read calls made on the underlying file (summary, metadata and chunks)."""
        return self._src.reads

    @property
    def bytes_read(self) -> int:
        """Bytes read from the underlying file so far."""
        return self._src.bytes_read

    @property
    def io_seconds(self) -> float:
        """Seconds spent inside read calls on the underlying file (I/O alone, no parsing)."""
        return self._src.seconds

    def read_sample(self, anchor_ns: int, spec: SampleSpec) -> Sample:
        """The sample at ``anchor_ns`` (integer nanoseconds, inside ``[start_ns, end_ns)``).

        With ``spec.cameras`` set, only those of the episode's cameras are read; cameras the
        episode lacks are the caller's to fill (the loader gives them black, invalid frames).
        """
        if not isinstance(spec, SampleSpec):
            raise SpecError(f"spec must be a SampleSpec, got {type(spec).__name__}")
        if not self.info.start_ns <= anchor_ns < self.info.end_ns:
            raise RangeError(
                f"anchor {anchor_ns} outside the episode "
                f"[{self.info.start_ns}, {self.info.end_ns})",
                file=self.name,
            )
        # Every chunk the sample needs is read before any frame is decoded, so a sample's
        # reads go out back to back and its CPU-bound decoding comes after its I/O.
        loaded = _Loaded(self, self._kept)
        # The whole state-and-action stretch: one chunk holding it (with its context) serves
        # both the state history and the action horizon.
        loaded.around = (
            anchor_ns - spec.state_history * spec.period_ns,
            anchor_ns + spec.action_horizon * spec.period_ns,
        )
        need = (spec.frames_per_camera - 1) * spec.frame_stride + 1
        cameras = [c for c in self.info.cameras if spec.cameras is None or c.topic in spec.cameras]
        if self._plan_reads:
            started = time.perf_counter()
            loaded.prefetch(self._plan(loaded, anchor_ns, spec, cameras))
            self.fetch_seconds += time.perf_counter() - started
        history = {
            cam.topic: self._frame_history(loaded, cam.topic, anchor_ns, need) for cam in cameras
        }
        # With a pool, the cameras decode in its threads while this one reads the vectors
        # (each camera has its own decoding run, so no two threads touch one).
        decoding: list[Future[_Picked]] = []
        if self._pool is not None:
            submit = self._pool.submit
            decoding = [submit(self._frames, c, history[c.topic], anchor_ns, spec) for c in cameras]
        try:
            state, state_ns, state_valid = self._state(loaded, anchor_ns, spec)
            actions, action_ns, action_valid = self._actions(loaded, anchor_ns, spec)
        finally:  # (every camera finishes before an error of this sample is raised)
            errors = [e for e in (future.exception() for future in decoding) if e is not None]
        if errors:
            raise errors[0]
        if self._keep_chunks:
            self._kept = loaded.chunks
        frames, frame_ns, frame_valid = {}, {}, {}
        decoded = [future.result() for future in decoding] or [
            self._frames(c, history[c.topic], anchor_ns, spec) for c in cameras
        ]
        for cam, found in zip(cameras, decoded, strict=True):
            frames[cam.topic], frame_ns[cam.topic], frame_valid[cam.topic] = found
        return Sample(
            anchor_ns,
            frames,
            frame_ns,
            frame_valid,
            state,
            state_ns,
            state_valid,
            actions,
            action_ns,
            action_valid,
        )

    def _plan(
        self, loaded: _Loaded, anchor_ns: int, spec: SampleSpec, cameras: list[TopicInfo]
    ) -> list[ChunkRef]:
        """The chunks the sample at ``anchor_ns`` reads, as far as the layout tells before any
        is read, so that chunks lying together go out as one read (a window's camera and
        state chunks, in Quarry's layout; the chunks of a stretch, interleaved).

        Cameras: every chunk of each camera from the window start (where a keyframe is)
        before its oldest frame up to the anchor. Vectors with window arrays: the window
        chunk :meth:`_windows_for` picks; without context copies (interleaved): every chunk
        overlapping their stretch. A chunk left out is still read when the sample asks for
        it (vectors with context copies: where :meth:`_span` finds them), one read of its
        own."""
        start, width = self.info.start_ns, self.info.window_ns
        refs: list[ChunkRef] = []
        for cam in cameras:
            back = (spec.frames_per_camera - 1) * spec.frame_stride * 1e9 / cam.rate_hz
            oldest = anchor_ns - round(back)
            keyed = start + max(0, (oldest - start) // width) * width
            refs += self._overlapping(cam.topic, keyed, anchor_ns)
        state = (anchor_ns - (spec.state_history - 1) * spec.period_ns, anchor_ns)
        horizon = anchor_ns + (spec.action_horizon - 1) * spec.period_ns
        vectors = [(t, state) for t in self.info.state_topics()]
        if (actions := self.info.vector(ACTIONS)) is not None:
            vectors.append((actions, (anchor_ns, min(horizon, self.info.end_ns - 1))))
        for topic, (lo, hi) in vectors:
            if topic.window_channel_id is not None:
                first, last = self._windows_for(lo, hi, loaded.around)
                for k in range(first, last + 1):
                    refs += list(self._window_chunks(topic.topic, start + k * width))[:1]
            elif topic.context_channel_id is None:
                refs += self._overlapping(topic.topic, lo, hi)
        return refs

    def _overlapping(self, topic: str, lo: int, hi: int) -> list[ChunkRef]:
        """Chunks with ``topic``'s messages overlapping ``[lo, hi]``."""
        refs, i = self._refs[topic], bisect.bisect_right(self._starts[topic], hi) - 1
        out = []
        while i >= 0 and refs[i].end_ns >= lo:
            out.append(refs[i])
            i -= 1
        return out

    def _frames(
        self, cam: TopicInfo, frames: list[_Frame], anchor_ns: int, spec: SampleSpec
    ) -> _Picked:
        """Decode the sample's frames of ``cam`` from its loaded history ``frames``."""
        count, stride = spec.frames_per_camera, spec.frame_stride
        times = np.array([h.time_ns for h, _ in frames], dtype=np.int64)
        picks = frame_picks(times, anchor_ns, count, stride)
        valid = picks >= 0
        height, width = int(cam.schema["height"]), int(cam.schema["width"])
        shape = (count, height, width, 3)
        out = np.empty(shape, dtype=np.uint8) if valid.all() else np.zeros(shape, dtype=np.uint8)
        out_ns = np.full(count, anchor_ns, dtype=np.int64)
        if valid.any():
            decoded = self._decode(cam, frames, [int(p) for p in picks[valid]])
            for k, frame in zip(np.flatnonzero(valid), decoded, strict=True):
                out[k] = frame
            out_ns[valid] = times[picks[valid]]
            first = int(np.argmax(valid))
            out[~valid], out_ns[~valid] = out[first], out_ns[first]
        return out, out_ns, valid

    def _frame_history(
        self, loaded: _Loaded, topic: str, anchor_ns: int, need: int
    ) -> list[_Frame]:
        """Frames of ``topic`` from enough chunks back to hold ``need`` frames at/before the
        anchor and a keyframe before the oldest, sorted by frame index."""
        refs = self._refs[topic]
        i = bisect.bisect_right(self._starts[topic], anchor_ns) - 1
        frames: list[_Frame] = []
        while i >= 0:
            frames.extend(loaded.frames(refs[i], self.info.topics[topic], anchor_ns))
            frames.sort(key=lambda f: f[0].index)
            i -= 1
            before = [k for k, (h, _) in enumerate(frames) if h.time_ns <= anchor_ns]
            if len(before) < need:
                continue
            oldest = before[-need]
            keyed = any(h.keyframe for h, _ in frames[: oldest + 1])
            if keyed and (i < 0 or refs[i].end_ns < frames[oldest][0].time_ns):
                break
        return frames

    def _decode(self, cam: TopicInfo, frames: list[_Frame], picks: list[int]) -> list[Any]:
        if cam.schema["codec"] == "jpeg":
            return [decode_jpeg(frames[p][1], topic=cam.topic) for p in picks]
        try:
            return self._runs.decode(cam.topic, frames, picks)
        except DecodeError as exc:
            exc.file, exc.offset = self.name, None
            raise

    def _state(
        self, loaded: _Loaded, anchor_ns: int, spec: SampleSpec
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        topics = self.info.state_topics()
        if not topics:
            raise TopicError("container has no state topics", file=self.name)
        at = grid(anchor_ns, spec.period_ns, spec.state_history, 0)
        parts, valid = [], np.ones(len(at), dtype=bool)
        for topic in topics:
            found = self._from_arrays(loaded, topic, int(at[0]), anchor_ns, True)
            times, values = found or loaded.vectors(
                self._span(loaded, topic, int(at[0]), anchor_ns, True), topic
            )
            part, ok = interpolate(
                times, values, at, 1e9 / topic.rate_hz, ordered=found is not None
            )
            parts.append(part)
            valid &= ok
        return np.concatenate(parts, axis=1), at, valid

    def _actions(
        self, loaded: _Loaded, anchor_ns: int, spec: SampleSpec
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        topic = self.info.vector(ACTIONS)
        if topic is None:
            raise TopicError("container has no actions topic", file=self.name, topic=ACTIONS)
        at = grid(anchor_ns, spec.period_ns, 0, spec.action_horizon)
        hi = min(int(at[-1]), self.info.end_ns - 1)
        found = self._from_arrays(loaded, topic, anchor_ns, hi, False)
        times, values = found or loaded.vectors(
            self._span(loaded, topic, anchor_ns, hi, False), topic
        )
        out, valid = hold(times, values, at, 1e9 / topic.rate_hz, ordered=found is not None)
        return out, at, valid & (at < self.info.end_ns)

    def _from_arrays(
        self, loaded: _Loaded, topic: TopicInfo, lo: int, hi: int, after: bool
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        """``topic``'s samples in ``[lo, hi]`` with one at/before ``lo`` (and, if ``after``,
        one at/after ``hi``) where they exist, from its window arrays; ``None`` when the
        container has none (it was written before them, or without).

        The fewest windows whose arrays (each holding its window and the context around it)
        span the range are read, and one more on a side where the neighbour outside the range
        lies beyond them. Rows come in (time, sequence) order, the order the per-step path
        resamples in, so both give the same sample."""
        if topic.window_channel_id is None:
            return None
        first, last = self._windows_for(lo, hi, loaded.around)
        while True:
            times, values, span = self._join(loaded, topic, first, last, lo, hi)
            before = span[0] <= self.info.start_ns or (len(times) > 0 and times[0] <= lo)
            # (an array's span holds every sample up to its end, so a range past it needs the
            # next window even when no neighbour after the range is asked for)
            ends = span[1] >= self.info.end_ns
            behind = ends or (span[1] > hi and (not after or (len(times) > 0 and times[-1] >= hi)))
            if not before and first > 0:
                first -= 1
            elif not behind and last < self._last_window:
                last += 1
            else:
                return times, values

    def _windows_for(self, lo: int, hi: int, around: tuple[int, int] | None) -> tuple[int, int]:
        """The first and last window whose arrays span ``[lo, hi]``, the arrays holding
        ``context_ns`` on either side of their window: the fewest, and where one window does,
        one that also spans the sample's whole stretch ``around`` (so that the state and the
        action topics take the same chunk), nearest the middle of the stretch."""
        start, width, context = self.info.start_ns, self.info.window_ns, self.info.context_ns

        def window(time_ns: int) -> int:
            return min(max((time_ns - start) // width, 0), self._last_window)

        low, high = window(hi - context), window(lo + context)  # each alone spans [lo, hi]
        if low > high:
            return high, low
        around = around or (lo, hi)
        wide_low, wide_high = (
            max(low, window(around[1] - context)),
            min(high, window(around[0] + context)),
        )
        if wide_low <= wide_high:
            low, high = wide_low, wide_high
        middle = window((around[0] + around[1]) // 2)
        k = min(max(middle, low), high)
        return k, k

    def _join(
        self, loaded: _Loaded, topic: TopicInfo, first: int, last: int, lo: int, hi: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], tuple[int, int]]:
        """Rows of windows ``first``..``last`` (each window's own, plus the context before the
        first and after the last), cut to ``[lo, hi]`` and their neighbours, and the span."""
        arrays = [self._window(loaded, topic, k) for k in range(first, last + 1)]
        if len(arrays) == 1:
            times, values = arrays[0].times, arrays[0].values
        else:
            start, width = self.info.start_ns, self.info.window_ns
            parts = []
            for k, array in enumerate(arrays, first):
                own_lo = array.span_start_ns if k == first else start + k * width
                own_hi = array.span_end_ns if k == last else start + (k + 1) * width
                a, b = np.searchsorted(array.times, (own_lo, own_hi))
                parts.append((array.times[a:b], array.values[a:b]))
            times = np.concatenate([t for t, _ in parts])
            values = np.concatenate([v for _, v in parts])
        a = max(0, int(np.searchsorted(times, lo, "left")) - 1)
        b = int(np.searchsorted(times, hi, "right")) + 1
        return times[a:b], values[a:b], (arrays[0].span_start_ns, arrays[-1].span_end_ns)

    def _window(self, loaded: _Loaded, topic: TopicInfo, k: int) -> msg.VectorWindow:
        """Window ``k``'s array of ``topic`` (the message at the window's start time on the
        topic's window channel), checked; a clear error naming topic and window otherwise."""
        at = self.info.start_ns + k * self.info.window_ns
        channel = topic.window_channel_id
        assert channel is not None
        found: list[Message] = []
        ref: ChunkRef | None = None
        for ref in self._window_chunks(topic.topic, at):
            found = [m for m in loaded.channel(ref, channel, at, at) if m.log_time == at]
            if found:
                break
        if len(found) != 1:
            raise ContainerError(
                f"window {k} has {len(found)} window arrays at {at}, expected 1",
                file=self.name,
                topic=topic.topic,
                offset=ref.offset if ref else None,
            )
        try:
            array = msg.unpack_window(found[0].data, len(topic.names), topic.topic, k)
            if array.span_start_ns > at or array.span_end_ns < at + self.info.window_ns:
                raise SchemaError(
                    f"window {k} array spans [{array.span_start_ns}, {array.span_end_ns}), "
                    f"less than its window [{at}, {at + self.info.window_ns})",
                    topic=topic.topic,
                )
        except SchemaError as exc:
            exc.file, exc.offset = self.name, ref.offset if ref else None
            raise
        return array

    def _window_chunks(self, topic: str, at: int) -> Iterator[ChunkRef]:
        """Chunks with ``topic``'s window arrays whose span holds ``at``: the latest one
        starting at/before it first (the only one in Quarry's layouts), then any other."""
        refs = self._window_refs[topic]
        i = bisect.bisect_right(self._window_starts[topic], at) - 1
        for ref in [*refs[i : i + 1], *reversed(refs[: max(i, 0)])]:
            if ref.start_ns <= at <= ref.end_ns:
                yield ref

    def _span(
        self, loaded: _Loaded, topic: TopicInfo, lo: int, hi: int, after: bool
    ) -> list[Message]:
        """Messages of ``topic`` from the chunks overlapping ``[lo, hi]``, extended to one
        message at/before ``lo`` (and, if ``after``, one at/after ``hi``) where they exist.

        When one chunk spans ``[lo, hi]`` with the topic's context copies, that chunk alone
        holds every message of the topic in the range (a chunk's span never reaches past its
        window and context), so only it is read."""
        if topic.context_channel_id is not None:
            found = self._span_in_one_chunk(loaded, topic, lo, hi, after)
            if found is not None:
                return found
        refs = self._refs[topic.topic]
        hits = [k for k, r in enumerate(refs) if r.start_ns <= hi and r.end_ns >= lo]
        first = hits[0] if hits else bisect.bisect_right(self._starts[topic.topic], lo)
        last = hits[-1] if hits else first - 1
        out = [m for k in hits for m in loaded.messages(refs[k], topic, lo, hi)]
        while first > 0 and not any(m.log_time <= lo for m in out):
            first -= 1
            out.extend(loaded.messages(refs[first], topic, lo, hi))
        while after and last + 1 < len(refs) and not any(m.log_time >= hi for m in out):
            last += 1
            out.extend(loaded.messages(refs[last], topic, lo, hi))
        return out

    def _span_in_one_chunk(
        self, loaded: _Loaded, topic: TopicInfo, lo: int, hi: int, after: bool
    ) -> list[Message] | None:
        """The span from a single chunk whose messages and context cover it, or ``None``.

        Among the chunks that cover ``[lo, hi]``, one already read for this sample comes
        first, then one that also covers the sample's whole state-and-action stretch, then the
        one with the most room on both sides."""
        covering = self._covering(topic.topic, lo, hi)
        if not covering:
            return None
        around = loaded.around or (lo, hi)

        def rank(ref: ChunkRef) -> tuple[bool, bool, int]:
            spans_all = ref.start_ns <= around[0] and ref.end_ns >= around[1]
            return (loaded.has(ref), spans_all, min(lo - ref.start_ns, ref.end_ns - hi))

        out = loaded.messages(max(covering, key=rank), topic, lo, hi, context=True)
        if not any(m.log_time <= lo for m in out):
            return None  # the message before the range lies further back
        if after and not any(m.log_time >= hi for m in out):
            return None
        return out

    def _covering(self, topic: str, lo: int, hi: int) -> list[ChunkRef]:
        """Chunks with ``topic``'s messages or context copies whose span holds ``[lo, hi]``.

        A span is at most a window plus the context on either side; with a context shorter
        than a window (the writer's default) only the last two chunks starting at/before
        ``lo`` can hold the range, so only those are looked at (a longer context only means a
        range may be read the general way)."""
        refs = self._context_refs.get(topic)
        if refs is None:
            return []
        last = bisect.bisect_right(self._context_starts[topic], lo)
        return [r for r in refs[max(0, last - 2) : last] if r.end_ns >= hi]

    def read_messages(
        self, topic: str, start_ns: int | None = None, end_ns: int | None = None
    ) -> list[Message]:
        """Messages of ``topic`` in recorded order (by sequence): every one, or those with a
        log time in ``[start_ns, end_ns)`` (integer ns), reading only the chunks that overlap
        (only one, when one chunk's messages and context copies span the range).

        :raises RangeError: the range is empty or does not overlap the episode.
        """
        info = self._topic(topic)
        lo, hi = self._range(topic, start_ns, end_ns)
        loaded = _Loaded(self)
        covering = self._covering(topic, lo, hi)
        if covering:
            found = loaded.messages(covering[0], info, lo, hi, context=True)
        else:
            refs = [r for r in self._refs[topic] if r.start_ns < hi and r.end_ns >= lo]
            found = [m for ref in refs for m in loaded.messages(ref, info, lo, hi)]
        unique = {m.sequence: m for m in found if lo <= m.log_time < hi}
        return [unique[k] for k in sorted(unique)]

    def read_vectors(
        self, topic: str, start_ns: int | None = None, end_ns: int | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Samples of a vector topic in recorded order, optionally in ``[start_ns, end_ns)``
        (as :meth:`read_messages`): times (N,) integer ns, values (N, D) float32."""
        info = self._topic(topic)
        return _unpack(self.read_messages(topic, start_ns, end_ns), info, self.name)

    def _range(self, topic: str, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
        episode = (self.info.start_ns, self.info.end_ns)
        lo = episode[0] if start_ns is None else start_ns
        hi = episode[1] if end_ns is None else end_ns
        if lo >= hi or hi <= episode[0] or lo >= episode[1]:
            raise RangeError(
                f"time range [{lo}, {hi}) is empty or outside the episode "
                f"[{episode[0]}, {episode[1]})",
                file=self.name,
                topic=topic,
            )
        return lo, hi

    def iter_frames(
        self, topic: str
    ) -> Iterator[tuple[msg.FrameHeader, npt.NDArray[np.uint8] | None]]:
        """Every frame of a camera in order, decoded; ``None`` for frames that fail to decode."""
        info = self._topic(topic)
        frames = [msg.unpack_frame(m.data, topic) for m in self.read_messages(topic)]
        for segment in _segments(frames, info.schema["codec"]):
            decoded: list[npt.NDArray[np.uint8] | None]
            try:
                if info.schema["codec"] == "jpeg":
                    decoded = [decode_jpeg(d, topic) for _, d in segment]
                else:
                    decoded = decode_h264([d for _, d in segment], topic)
            except DecodeError:
                decoded = [None] * len(segment)
            yield from zip((h for h, _ in segment), decoded, strict=True)

    def _topic(self, topic: str) -> TopicInfo:
        info = self.info.topics.get(topic)
        if info is None:
            raise TopicError("no such topic in the container", file=self.name, topic=topic)
        return info


class _Loaded:
    """Chunks read during one call, fetched once each and counted on the reader; a chunk in
    ``kept`` (the previous sample's, see ``keep_chunks``) is taken from there, unread."""

    def __init__(self, reader: EpisodeReader, kept: dict[int, LoadedChunk] | None = None) -> None:
        self._reader = reader
        self._kept = kept or {}
        self._chunks: dict[int, LoadedChunk] = {}
        #: the sample's state-and-action stretch, which a chunk choice should cover if it can.
        self.around: tuple[int, int] | None = None

    @property
    def chunks(self) -> dict[int, LoadedChunk]:
        """The chunks this call used, by file offset."""
        return self._chunks

    def prefetch(self, refs: list[ChunkRef]) -> None:
        """Read the chunks at ``refs`` not at hand yet, those lying close together in one read
        each (:func:`close_runs`), and count them as read."""
        wanted = {r.offset: r for r in refs if r.offset not in self._chunks}
        for offset in [o for o in wanted if o in self._kept]:
            self._chunks[offset] = self._kept[offset]
            del wanted[offset]
        for run in close_runs(list(wanted.values())):
            self._chunks.update(read_chunks(self._reader._src, run))
            self._reader.chunk_reads += len(run)

    def has(self, ref: ChunkRef) -> bool:
        """Whether the chunk at ``ref`` was already read in this call."""
        return ref.offset in self._chunks

    def messages(
        self,
        ref: ChunkRef,
        topic: TopicInfo,
        lo: int | None = None,
        hi: int | None = None,
        *,
        context: bool = False,
    ) -> list[Message]:
        """``topic``'s messages in the chunk at ``ref``: all, or those in ``[lo, hi]`` and
        their nearest neighbours outside it (see :meth:`LoadedChunk.messages`); with
        ``context``, its context copies in the chunk too (same sequence numbers)."""
        found = self.channel(ref, topic.channel_id, lo, hi)
        if context and topic.context_channel_id is not None:
            found += self.channel(ref, topic.context_channel_id, lo, hi)
        return found

    def channel(
        self, ref: ChunkRef, channel: int, lo: int | None = None, hi: int | None = None
    ) -> list[Message]:
        """``channel``'s messages in the chunk at ``ref`` (as :meth:`messages`)."""
        chunk = self._chunks.get(ref.offset)
        started = time.perf_counter()
        if chunk is None:
            chunk = self._kept.get(ref.offset)
            if chunk is None:
                chunk = read_chunk(self._reader._src, ref)
                self._reader.chunk_reads += 1
            self._chunks[ref.offset] = chunk
        found = chunk.messages(channel, lo, hi)
        self._reader.fetch_seconds += time.perf_counter() - started
        return found

    def frames(self, ref: ChunkRef, topic: TopicInfo, until_ns: int) -> list[_Frame]:
        """The chunk's frames of ``topic`` up to ``until_ns`` (and the one after it)."""
        messages = self.messages(ref, topic, None, until_ns)
        return [msg.unpack_frame(m.data, topic.topic) for m in messages]

    def vectors(
        self, messages: list[Message], topic: TopicInfo
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        unique = {m.sequence: m for m in messages}
        return _unpack([unique[k] for k in sorted(unique)], topic, self._reader.name)


def _unpack(
    messages: list[Message], topic: TopicInfo, name: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    try:
        return msg.unpack_vectors([m.data for m in messages], len(topic.names), topic.topic)
    except SchemaError as exc:
        exc.file = name
        raise


def _segments(frames: list[_Frame], codec: str) -> Iterator[list[_Frame]]:
    """Runs of frames that decode on their own: from each keyframe to the next."""
    segment: list[_Frame] = []
    for frame in frames:
        if segment and (codec == "jpeg" or frame[0].keyframe):
            yield segment
            segment = []
        segment.append(frame)
    if segment:
        yield segment


def _open(source: str | os.PathLike[str] | IO[bytes]) -> tuple[IO[bytes], bool, str]:
    """The stream for ``source``, whether this reader owns it, and a display name."""
    try:
        return _open_unchecked(source)
    except FileNotFoundError as exc:
        raise SourceError(f"no such container: {exc}", file=str(source), retryable=False) from exc
    except OSError as exc:
        raise SourceError(f"cannot open container: {exc}", file=str(source)) from exc


def _open_unchecked(source: str | os.PathLike[str] | IO[bytes]) -> tuple[IO[bytes], bool, str]:
    if isinstance(source, os.PathLike):
        return Path(source).open("rb"), True, os.fspath(source)
    if isinstance(source, str):
        if source.startswith("file://"):
            return Path(source.removeprefix("file://")).open("rb"), True, source
        if "://" in source:
            return fsspec.open(source, "rb", cache_type="none").open(), True, source
        return Path(source).open("rb"), True, source
    return source, False, str(getattr(source, "path", None) or getattr(source, "name", "<stream>"))
