"""Window arrays (one array per vector topic per window, episodes/layouts.py): samples equal
the per-step layout's, containers without them read as before, other MCAP tools still read
every topic, and a damaged array is an error naming its topic and window."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from episodes.episode import EpisodeData
from episodes.errors import SchemaError, TopicError
from episodes.layouts import WINDOW_PREFIX, Layout
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

from .rewrite import rewrite

FIXTURE = Path(__file__).parent / "fixtures" / "grouped_2026-12-02.mcap"
#: The fixture's episode: synth_episode(5, 1, SMALL), written before window arrays.
SMALL = FleetConfig(width=64, height=48, duration_s=(4.0, 4.0), fault_rate=0.0)
SPECS = [
    SampleSpec(frames_per_camera=3, frame_stride=2, state_history=8, action_horizon=16),
    SampleSpec(),
    # history and horizon past the context: arrays of two or three windows are joined
    SampleSpec(control_hz=15.0, state_history=16, action_horizon=32, anchor_stride=1),
]
FIELDS = ("state", "state_ns", "state_valid", "actions", "action_ns", "action_valid")
POSITIONS = "/state/joint_positions"


def write(path: Path, episode: EpisodeData, options: WriteOptions) -> Path:
    write_episode(episode, path, options)
    return path


def assert_same_samples(a: Path, b: Path, spec: SampleSpec, stride: int = 1) -> None:
    spec = replace(spec, cameras=("/cam/none",))  # no camera the episode has: no decoding
    with EpisodeReader(a) as left, EpisodeReader(b) as right:
        anchors = spec.anchors(left.info.start_ns, left.info.end_ns)[::stride]
        assert len(anchors) > 10
        for anchor in [int(a) for a in anchors] + [left.info.end_ns - 1]:
            x, y = left.read_sample(anchor, spec), right.read_sample(anchor, spec)
            for name in FIELDS:
                np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture's episode written today (window arrays, the default)."""
    folder = tmp_path_factory.mktemp("arrays")
    return write(folder / "new.mcap", synth_episode(5, 1, SMALL), WriteOptions())


@pytest.mark.parametrize("spec", SPECS)
def test_samples_equal_the_container_from_the_earlier_writer(small: Path, spec: SampleSpec) -> None:
    with EpisodeReader(small) as new, EpisodeReader(FIXTURE) as old:
        assert all(t.window_channel_id is not None for t in new.info.topics.values() if t.names)
        assert all(t.window_channel_id is None for t in old.info.topics.values())
        assert all(t.context_channel_id is None for t in new.info.topics.values())
    assert_same_samples(small, FIXTURE, spec)


@pytest.mark.parametrize(
    "options",
    [
        WriteOptions(context_s=0.0),  # arrays without context: every range joins windows
        WriteOptions(layout=Layout.PER_TOPIC),
        WriteOptions(window_s=1.0),
    ],
    ids=["no-context", "per-topic", "window-1s"],
)
def test_faulty_joints_sample_the_same_as_per_step_messages(
    options: WriteOptions, tmp_path: Path
) -> None:
    """A gap, jumps and samples out of time order (choppy_joints), window edges and both
    episode ends: the arrays give what the per-step messages give."""
    episode = synth_episode(11, 3, SMALL, faults=("choppy_joints",))
    arrays = write(tmp_path / "arrays.mcap", episode, options)
    steps = write(tmp_path / "steps.mcap", episode, WriteOptions(vector_arrays=False))
    for spec in SPECS:
        assert_same_samples(arrays, steps, spec, stride=2)


def test_samples_come_from_the_arrays_alone(small: Path, tmp_path: Path) -> None:
    """With every per-step state and action message garbled (and mcap's default chunking from
    the rewrite), samples are unchanged: the reader parsed only the arrays."""

    def garble(topic: str, data: bytes) -> bytes:
        return data if topic.startswith(WINDOW_PREFIX) or "/cam/" in topic else b"x"

    garbled = rewrite(small, tmp_path / "garbled.mcap", edit=garble)
    for spec in SPECS:
        assert_same_samples(garbled, small, spec, stride=3)
    with EpisodeReader(garbled) as reader, pytest.raises(SchemaError):
        reader.read_vectors(POSITIONS)  # the per-step path would have failed


def test_other_mcap_tools_read_every_topic(small: Path) -> None:
    """mcap's own reader iterates every topic's messages; the window arrays decode from the
    layout their schema spells out and hold exactly the per-step samples."""
    episode = synth_episode(5, 1, SMALL)
    with small.open("rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        by_topic: dict[str, list[tuple[int, bytes]]] = {}
        schemas = {}
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            by_topic.setdefault(channel.topic, []).append((message.sequence, message.data))
            schemas[channel.topic] = json.loads(schema.data) if schema else None
    counts = summary.statistics.channel_message_counts
    assert {c.topic: counts[c.id] for c in summary.channels.values()} == {
        t: len(m) for t, m in by_topic.items()
    }
    windows = -(-(episode.end_ns - episode.start_ns) // (2 * 10**9))
    assert {c.topic for c in episode.cameras} <= by_topic.keys()
    for vec in episode.vectors:
        steps = sorted(by_topic[vec.topic])
        assert [s for s, _ in steps] == list(range(len(vec.timestamps_ns)))
        head = struct.Struct(schemas[vec.topic]["header"])
        assert [head.unpack_from(d)[0] for _, d in steps] == vec.timestamps_ns.tolist()
        arrays = sorted(by_topic[WINDOW_PREFIX + vec.topic])
        assert [k for k, _ in arrays] == list(range(windows))
        layout = schemas[WINDOW_PREFIX + vec.topic]
        assert layout["names"] == list(vec.names) and layout["dtype"] == "float32"
        times, sequences, values = [], [], []
        for k, data in arrays:
            lo, hi, rows, dims, _ = struct.unpack_from(layout["header"], data)
            size = struct.calcsize(layout["header"])
            t = np.frombuffer(data, "<i8", rows, size)
            s = np.frombuffer(data, "<u4", rows, size + 8 * rows)
            v = np.frombuffer(data, "<f4", rows * dims, size + 12 * rows).reshape(rows, dims)
            own = (t >= episode.start_ns + k * 2 * 10**9) & (
                t < episode.start_ns + (k + 1) * 2 * 10**9
            )
            assert lo <= t.min() and t.max() < hi
            times += t[own].tolist()
            sequences += s[own].tolist()
            values.append(v[own])
        assert sorted(sequences) == list(range(len(vec.timestamps_ns)))
        order = np.argsort(sequences)
        assert np.asarray(times)[order].tolist() == vec.timestamps_ns.tolist()
        np.testing.assert_array_equal(np.concatenate(values)[order], vec.values)


def _edit_window(window: int, change: str) -> object:
    """An edit for rewrite(): damage window ``window``'s joint positions array."""
    start = synth_episode(5, 1, SMALL).start_ns

    def edit(topic: str, data: bytes) -> bytes:
        if topic != WINDOW_PREFIX + POSITIONS:
            return data
        lo, hi, rows, dims, zero = struct.unpack_from("<qqIHH", data)
        if (lo + 7 * 10**8 - start) // (2 * 10**9) != window:
            return data
        if change == "short":  # one value missing: length disagrees with its timestamps
            return data[:-4]
        if change == "rows":  # more rows claimed than the message holds
            return struct.pack("<qqIHH", lo, hi, rows + 1, dims, zero) + data[24:]
        if change == "dims":
            return struct.pack("<qqIHH", lo, hi, rows, dims + 1, zero) + data[24:]
        times = np.frombuffer(data, "<i8", rows, 24).copy()
        if change == "order":
            times[[3, 4]] = times[[4, 3]]
        else:  # "span": a time past the array's span
            times[-1] = hi
        return data[:24] + times.tobytes() + data[24 + 8 * rows :]

    return edit


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("short", "needs"),
        ("rows", "needs"),
        ("dims", "values a row, the schema says 6"),
        ("order", "out of order"),
        ("span", "outside its span"),
    ],
)
def test_a_bad_window_array_names_its_topic_and_window(
    change: str, words: str, small: Path, tmp_path: Path
) -> None:
    bad = rewrite(small, tmp_path / "bad.mcap", edit=_edit_window(1, change))  # type: ignore[arg-type]
    with EpisodeReader(bad) as reader:
        info = reader.info
        reader.read_sample(info.start_ns + 10**9, SPECS[0])  # window 0 is whole
        with pytest.raises(SchemaError) as caught:
            reader.read_sample(info.start_ns + 3 * 10**9, SPECS[0])
    error = caught.value
    assert error.topic == POSITIONS and error.file == str(bad) and error.offset is not None
    assert "window 1 array" in str(error) and words in str(error)


def test_a_missing_window_topic_is_refused_on_open(small: Path, tmp_path: Path) -> None:
    bad = rewrite(small, tmp_path / "bad.mcap", drop=(WINDOW_PREFIX + POSITIONS,))
    with pytest.raises(TopicError, match="window topic") as caught:
        EpisodeReader(bad)
    assert caught.value.topic == POSITIONS


def test_storage_stays_within_today_s_bytes(tmp_path: Path) -> None:
    """Arrays replace the context copies: the container is no larger than the layout before."""
    episode = synth_episode(11, 3, SMALL, faults=())
    arrays = write(tmp_path / "a.mcap", episode, WriteOptions())
    steps = write(tmp_path / "s.mcap", episode, WriteOptions(vector_arrays=False))
    assert arrays.stat().st_size <= 1.05 * steps.stat().st_size


def test_arrays_with_less_context_than_claimed_still_give_every_sample(tmp_path: Path) -> None:
    """The reader picks windows by the layout's context_ns but checks each array's own span:
    arrays holding less (here 0.1 s against a claimed 0.7 s) only cost more windows read."""
    episode = synth_episode(11, 3, SMALL, faults=("choppy_joints",))
    thin = write(tmp_path / "thin.mcap", episode, WriteOptions(context_s=0.1))
    steps = write(tmp_path / "steps.mcap", episode, WriteOptions(vector_arrays=False))
    spec = replace(SPECS[1], cameras=("/cam/none",))
    with EpisodeReader(thin) as left, EpisodeReader(steps) as right:
        left.info = replace(left.info, context_ns=7 * 10**8)
        for anchor in spec.anchors(left.info.start_ns, left.info.end_ns):
            x, y = left.read_sample(int(anchor), spec), right.read_sample(int(anchor), spec)
            for name in FIELDS:
                np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
