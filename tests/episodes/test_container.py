"""Container round trip: layout on disk, samples read back, chunk reads counted."""

from __future__ import annotations

import io
from pathlib import Path

import fsspec
import numpy as np
import pytest

from episodes.episode import ACTIONS, STATE_KINDS, EpisodeData
from episodes.layouts import CAMERA_GROUP, STATE_GROUP, Layout
from episodes.messages import unpack_frame
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.synth import synth_episode
from episodes.writer import WriteOptions

from .conftest import SHORT, write

SPEC = SampleSpec()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float(10 * np.log10(255**2 / max(mse, 1e-9)))


@pytest.mark.parametrize("arrays", [True, False])
def test_one_chunk_per_group_per_window(
    arrays: bool, container: Path, episode: EpisodeData, tmp_path: Path
) -> None:
    """Default (window arrays): each window's state chunk holds its own samples and one
    array per topic, nothing outside the window. Without arrays: its samples and context
    copies up to context_ns on either side."""
    path = container if arrays else write(tmp_path, episode, WriteOptions(vector_arrays=False))
    with EpisodeReader(path) as reader:
        info = reader.info
        assert info.layout == "grouped" and info.window_ns == 2 * 10**9
        windows = -(-(episode.end_ns - episode.start_ns) // info.window_ns)
        assert len(info.chunks) == 2 * windows
        groups = {t.channel_id: t.group for t in info.topics.values()}
        extra = {
            t.context_channel_id: t.group
            for t in info.topics.values()
            if t.context_channel_id is not None
        }
        windowed = {
            t.window_channel_id: t.group
            for t in info.topics.values()
            if t.window_channel_id is not None
        }
        assert info.context_ns == 7 * 10**8
        assert set((windowed if arrays else extra).values()) == {STATE_GROUP}
        assert not (extra if arrays else windowed)
        seen = []
        for chunk in sorted(info.chunks, key=lambda c: c.offset):
            kinds = {groups.get(c) or {**extra, **windowed}[c] for c in chunk.channel_ids}
            assert len(kinds) == 1
            kind = kinds.pop()
            if kind == CAMERA_GROUP or arrays:
                window = (chunk.start_ns - episode.start_ns) // info.window_ns
                assert (chunk.end_ns - episode.start_ns) // info.window_ns == window
            if kind == STATE_GROUP and arrays:
                assert chunk.channel_ids == set(groups) - {
                    c.channel_id for c in info.cameras
                } | set(windowed)
            elif kind == STATE_GROUP:  # the camera chunk's window, with context on either side
                low = episode.start_ns + window * info.window_ns - info.context_ns
                assert (
                    low
                    <= chunk.start_ns
                    <= chunk.end_ns
                    < low + info.window_ns + 2 * (info.context_ns)
                )
            seen.append((int(window), kind))
        # Time-major: window by window, cameras then state.
        assert seen == [(w, g) for w in range(windows) for g in (CAMERA_GROUP, STATE_GROUP)]
        assert set(info.groups[STATE_GROUP]) == {v.topic for v in episode.vectors}


def test_every_window_starts_with_a_keyframe(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader:
        for cam in episode.cameras:
            headers = [unpack_frame(m.data)[0] for m in reader.read_messages(cam.topic)]
            windows = [(h.time_ns - episode.start_ns) // reader.info.window_ns for h in headers]
            starts = [i for i in range(len(headers)) if i == 0 or windows[i] != windows[i - 1]]
            assert [i for i, h in enumerate(headers) if h.keyframe] == starts


def test_metadata_carries_stamps_rates_and_layout(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader:
        info = reader.info
    assert info.stamps == episode.stamps
    assert info.episode["episode_id"] == episode.episode_id
    assert info.start_ns == episode.start_ns and info.end_ns == episode.end_ns
    assert {t: i.rate_hz for t, i in info.topics.items()} == {
        **{c.topic: c.fps for c in episode.cameras},
        **{v.topic: v.rate_hz for v in episode.vectors},
    }
    assert info.video["codec"] == "h264"


def test_sample_round_trip(container: Path, episode: EpisodeData) -> None:
    anchor = episode.start_ns + 3 * 10**9 + 7 * SPEC.period_ns
    with EpisodeReader(container) as reader:
        sample = reader.read_sample(anchor, SPEC)
    for cam in episode.cameras:
        frames, stamps = sample.frames[cam.topic], sample.frame_ns[cam.topic]
        assert frames.shape == (SPEC.frames_per_camera, cam.height, cam.width, 3)
        assert frames.dtype == np.uint8 and sample.frame_valid[cam.topic].all()
        last = int(np.searchsorted(cam.timestamps_ns, anchor, side="right")) - 1
        assert stamps.tolist() == cam.timestamps_ns[last - 1 : last + 1].tolist()
        for got, want in zip(frames, cam.frames[last - 1 : last + 1], strict=True):
            assert psnr(got, want) > 27.0
    assert sample.state.shape == (SPEC.state_history, 13) and sample.state_valid.all()
    assert sample.state_ns[-1] == anchor and np.all(np.diff(sample.state_ns) == SPEC.period_ns)
    pos = episode.vector(STATE_KINDS[0])
    want = [np.interp(sample.state_ns, pos.timestamps_ns, pos.values[:, j]) for j in range(6)]
    np.testing.assert_allclose(sample.state[:, :6], np.stack(want, 1), atol=1e-5)
    actions = episode.vector(ACTIONS)
    first = int(np.searchsorted(actions.timestamps_ns, anchor))
    np.testing.assert_array_equal(sample.actions, actions.values[first : first + 32])
    assert sample.action_valid.all()


def test_aligned_sample_reads_one_chunk_per_group(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader:
        window = reader.info.window_ns
        middle = episode.start_ns + window + window // 2  # history and horizon inside window 1
        reader.read_sample(middle, SPEC)
        assert reader.chunk_reads == 2
        # 100 ms into window 2: the frames are inside it, the state history is not; the
        # state chunk's context holds it.
        reader.read_sample(episode.start_ns + 2 * window + 5 * SPEC.period_ns, SPEC)
        assert reader.chunk_reads == 2 + 2
        # 300 ms before window 2 ends: the action horizon crosses the edge, same.
        reader.read_sample(episode.start_ns + 3 * window - 15 * SPEC.period_ns, SPEC)
        assert reader.chunk_reads == 2 + 2 + 2
        # At the window's first frame, the frame history reaches back to window 1's cameras.
        reader.read_sample(episode.start_ns + 2 * window + SPEC.period_ns, SPEC)
        assert reader.chunk_reads == 2 + 2 + 2 + 3


def test_without_context_a_crossing_window_reads_the_neighbour(
    episode: EpisodeData, tmp_path: Path
) -> None:
    plain = write(tmp_path, episode, WriteOptions(context_s=0.0))
    with EpisodeReader(plain) as reader:
        assert reader.info.context_ns == 0
        assert all(t.context_channel_id is None for t in reader.info.topics.values())
        reader.read_sample(episode.start_ns + 2 * reader.info.window_ns + 5 * SPEC.period_ns, SPEC)
        assert reader.chunk_reads == 3


@pytest.mark.parametrize("faults", [(), ("choppy_joints",)])
def test_context_changes_no_sample_and_no_topic_read(
    faults: tuple[str, ...], tmp_path: Path
) -> None:
    """Samples anywhere (edges, window edges, a gap in the joints, samples out of time
    order) and whole-topic reads are the same with and without context copies: the copies
    are never returned twice, and none is missing."""
    episode = synth_episode(11, 3, SHORT, faults=faults)
    container = write(tmp_path, episode)
    (tmp_path / "plain").mkdir()
    plain = write(tmp_path / "plain", episode, WriteOptions(context_s=0.0))
    with EpisodeReader(container) as with_context, EpisodeReader(plain) as without:
        for anchor in range(episode.start_ns, episode.end_ns, 3 * SPEC.period_ns):
            a, b = with_context.read_sample(anchor, SPEC), without.read_sample(anchor, SPEC)
            for name in ("state", "state_ns", "state_valid", "actions", "action_ns"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
            np.testing.assert_array_equal(a.action_valid, b.action_valid)
        assert with_context.chunk_reads < without.chunk_reads
        for vec in episode.vectors:
            times, values = with_context.read_vectors(vec.topic)
            assert times.tolist() == vec.timestamps_ns.tolist()
            np.testing.assert_array_equal(values, without.read_vectors(vec.topic)[1])


def test_edges_are_masked(container: Path, episode: EpisodeData) -> None:
    with EpisodeReader(container) as reader:
        first = reader.read_sample(episode.start_ns + 4 * SPEC.period_ns, SPEC)
        last = reader.read_sample(episode.end_ns - 1, SPEC)
    assert not first.state_valid[:10].any() and first.state_valid[-1]
    assert first.action_valid.all()
    assert last.state_valid.all() and last.action_valid[0] and not last.action_valid[1:].any()
    np.testing.assert_array_equal(last.actions[1:], np.repeat(last.actions[:1], 31, axis=0))


def test_reads_through_an_fsspec_file(container: Path, episode: EpisodeData) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/episodes/x.mcap", container.read_bytes())
    anchor = episode.start_ns + 10**9
    with fs.open("/episodes/x.mcap", "rb") as remote, EpisodeReader(container) as local:
        reader = EpisodeReader(remote, name="memory://episodes/x.mcap")
        got, want = reader.read_sample(anchor, SPEC), local.read_sample(anchor, SPEC)
        # Summary (footer read) + metadata + one read for the window's two chunks (they lie
        # together): never the whole file.
        assert reader.chunk_reads == 2 and reader.requests == 2 + 1
    for cam in episode.cameras:
        np.testing.assert_array_equal(got.frames[cam.topic], want.frames[cam.topic])
    np.testing.assert_array_equal(got.state, want.state)


@pytest.mark.parametrize("layout", [Layout.PER_TOPIC, Layout.INTERLEAVED])
def test_benchmark_layouts_read_the_same_samples(
    layout: Layout, container: Path, episode: EpisodeData, tmp_path: Path
) -> None:
    other = write(tmp_path, episode, WriteOptions(layout=layout))
    anchor = episode.start_ns + 2 * 10**9 + 500 * 10**6
    with EpisodeReader(other) as reader, EpisodeReader(container) as grouped:
        got, want = reader.read_sample(anchor, SPEC), grouped.read_sample(anchor, SPEC)
        assert reader.info.layout == str(layout)
        if layout is Layout.PER_TOPIC:
            topics = len(reader.info.topics)
            assert reader.chunk_reads == topics and grouped.chunk_reads == 2
    for cam in episode.cameras:
        np.testing.assert_array_equal(got.frames[cam.topic], want.frames[cam.topic])
    np.testing.assert_array_equal(got.state, want.state)
    np.testing.assert_array_equal(got.actions, want.actions)


def test_jpeg_frames_decode(episode: EpisodeData, tmp_path: Path) -> None:
    from episodes._h264 import VideoConfig

    path = write(tmp_path, episode, WriteOptions(video=VideoConfig(codec="jpeg")))
    anchor = episode.start_ns + 10**9
    with EpisodeReader(io.BytesIO(path.read_bytes())) as reader:
        sample = reader.read_sample(anchor, SPEC)
    cam = episode.cameras[0]
    last = int(np.searchsorted(cam.timestamps_ns, anchor, side="right")) - 1
    assert psnr(sample.frames[cam.topic][-1], cam.frames[last]) > 30.0


def test_inspect(container: Path, episode: EpisodeData) -> None:
    from episodes.inspection import inspect

    out = inspect("file://" + str(container))
    assert out["episode"]["episode_id"] == episode.episode_id
    assert out["stamps"]["robot_sw_version"] == episode.stamps.robot_sw_version
    assert {t["group"] for t in out["topics"]} == {CAMERA_GROUP, STATE_GROUP}
    assert not any(t["topic"].startswith("/quarry/context") for t in out["topics"])
    assert out["layout"]["context_ns"] == 7 * 10**8 and out["layout"]["window_arrays"]
    assert all(
        len({t["topic"] for t in out["topics"] if t["topic"] in c["topics"]}) >= 1
        for c in out["chunks"]
    )
    assert out["quality"]["flags"] == []
    assert json_round_trips(out)


def json_round_trips(value: object) -> bool:
    import json

    return json.loads(json.dumps(value)) == value
