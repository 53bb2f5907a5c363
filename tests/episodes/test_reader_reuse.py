"""What a reader carries from one sample to the next (``keep_chunks``) and decoding a sample's
cameras side by side (``decode_pool``): the same samples as a fresh reader, fewer chunk reads,
and a damaged frame still reported by file and topic."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from episodes import messages as msg
from episodes.episode import EpisodeData
from episodes.errors import DecodeError
from episodes.reader import EpisodeReader
from episodes.sample import Sample
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

from .rewrite import rewrite

SPEC = SampleSpec(frames_per_camera=2, state_history=8, action_horizon=16, anchor_stride=5)
FLEET = FleetConfig(width=64, height=48, duration_s=(5.0, 5.0), fault_rate=0.0)


@pytest.fixture(scope="module")
def episode() -> EpisodeData:
    return synth_episode(11, 2, FLEET)


@pytest.fixture(scope="module")
def container(episode: EpisodeData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reuse") / "episode.mcap"
    write_episode(episode, path, WriteOptions())
    return path


def assert_same(got: Sample, expected: Sample) -> None:
    for name in ("state", "state_ns", "state_valid", "actions", "action_ns", "action_valid"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    assert got.frames.keys() == expected.frames.keys()
    for topic in expected.frames:
        np.testing.assert_array_equal(got.frames[topic], expected.frames[topic], err_msg=topic)
        np.testing.assert_array_equal(got.frame_ns[topic], expected.frame_ns[topic])
        np.testing.assert_array_equal(got.frame_valid[topic], expected.frame_valid[topic])


@pytest.mark.parametrize(("keep", "threads"), [(True, 0), (False, 2), (True, 3)])
def test_reuse_and_threads_give_the_fresh_samples(
    container: Path, keep: bool, threads: int
) -> None:
    anchors = SPEC.anchors(*_span(container))
    # forward through windows, a repeat, a jump back and one to the end
    order = [*anchors[3:40], anchors[20], anchors[20], anchors[1], anchors[-1]]
    pool = ThreadPoolExecutor(threads) if threads else None
    try:
        with EpisodeReader(container, keep_chunks=keep, decode_pool=pool) as reader:
            for anchor in order:
                with EpisodeReader(container) as fresh:
                    expected = fresh.read_sample(int(anchor), SPEC)
                assert_same(reader.read_sample(int(anchor), SPEC), expected)
    finally:
        if pool is not None:
            pool.shutdown()


def test_kept_chunks_are_not_read_again(container: Path) -> None:
    anchors = [int(a) for a in SPEC.anchors(*_span(container))]
    with EpisodeReader(container) as cold, EpisodeReader(container, keep_chunks=True) as warm:
        for anchor in anchors:
            cold.read_sample(anchor, SPEC)
            warm.read_sample(anchor, SPEC)
        windows = len({(a - cold.info.start_ns) // cold.info.window_ns for a in anchors})
        # every sample reads its chunks afresh without keep_chunks (a camera and a state chunk,
        # the first sample only one); with it, a chunk is read once while consecutive samples
        # need it (a camera and a state chunk a window, plus a neighbour where a sample's
        # history crosses a window's edge)
        assert cold.chunk_reads >= 2 * len(anchors) - 1
        assert warm.chunk_reads <= 3 * windows < cold.chunk_reads / 4


def test_a_damaged_frame_decoded_in_a_pool_thread_names_file_and_topic(
    container: Path, tmp_path: Path
) -> None:
    with EpisodeReader(container) as reader:
        cameras = [c.topic for c in reader.info.cameras]
    damaged_topic = cameras[-1]  # decoded in a pool thread (the first camera is decoded inline)

    def garble(topic: str, data: bytes) -> bytes:
        if topic != damaged_topic:
            return data
        header, unit = msg.unpack_frame(data, topic)
        return msg.pack_frame(header, unit[:8] + bytes(len(unit) - 8))

    damaged = rewrite(container, tmp_path / "damaged.mcap", edit=garble)
    anchor = int(SPEC.anchors(*_span(container))[12])
    with (
        ThreadPoolExecutor(2) as pool,
        EpisodeReader(damaged, name="damaged.mcap", decode_pool=pool) as reader,
        pytest.raises(DecodeError) as caught,
    ):
        reader.read_sample(anchor, SPEC)
    assert caught.value.file == "damaged.mcap" and caught.value.topic == damaged_topic


def _span(path: Path) -> tuple[int, int]:
    with EpisodeReader(path) as reader:
        return reader.info.start_ns, reader.info.end_ns
