"""Decoding runs carried across samples (episodes/_decoded.py), the writer's keyframe
interval, and a container from the writer before both (a fixture) still reading the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from episodes import messages as msg
from episodes._h264 import VideoConfig
from episodes.episode import EpisodeData
from episodes.errors import InputError
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

FIXTURE = Path(__file__).parent / "fixtures" / "grouped_2026-12-02.mcap"
SPEC = SampleSpec(frames_per_camera=3, frame_stride=2, state_history=8, action_horizon=16)
SMALL = FleetConfig(width=64, height=48, duration_s=(4.0, 4.0), fault_rate=0.0)


def fresh_frames(path: Path, anchor: int, spec: SampleSpec) -> dict[str, np.ndarray]:
    """The sample's frames from a reader that decoded nothing before (decodes from the key)."""
    with EpisodeReader(path) as reader:
        return reader.read_sample(anchor, spec).frames


def full_decode(path: Path) -> dict[str, dict[int, np.ndarray]]:
    """Every frame of every camera by frame time, decoded whole (iter_frames, no runs)."""
    with EpisodeReader(path) as reader:
        return {
            cam.topic: {h.time_ns: f for h, f in reader.iter_frames(cam.topic)}
            for cam in reader.info.cameras
        }


@pytest.fixture(scope="module")
def small_episode() -> EpisodeData:
    return synth_episode(5, 1, SMALL)


@pytest.mark.parametrize("keyframe_s", [None, 0.2])
def test_runs_serve_any_order_like_fresh_reads(
    small_episode: EpisodeData, tmp_path: Path, keyframe_s: float | None
) -> None:
    path = tmp_path / "episode.mcap"
    write_episode(small_episode, path, WriteOptions(video=VideoConfig(keyframe_s=keyframe_s)))
    anchors = SPEC.anchors(small_episode.start_ns, small_episode.end_ns)
    # forward runs, a jump back, repeats and a jump across windows
    order = [*anchors[10:30], anchors[12], anchors[12], anchors[-1], anchors[3], anchors[35]]
    with EpisodeReader(path) as reader:
        for anchor in order:
            got = reader.read_sample(int(anchor), SPEC)
            expected = fresh_frames(path, int(anchor), SPEC)
            for topic, frames in expected.items():
                np.testing.assert_array_equal(got.frames[topic], frames, err_msg=topic)


def test_keyframe_interval_puts_keys_inside_windows(
    small_episode: EpisodeData, tmp_path: Path
) -> None:
    path = tmp_path / "keys.mcap"
    write_episode(small_episode, path, WriteOptions(video=VideoConfig(keyframe_s=0.5)))
    with EpisodeReader(path) as reader:
        assert reader.info.video["keyframe_s"] == 0.5
        for cam in reader.info.cameras:
            headers = [
                msg.unpack_frame(m.data, cam.topic)[0] for m in reader.read_messages(cam.topic)
            ]
            step, window = round(0.5 * cam.rate_hz), round(2.0 * cam.rate_hz)
            keys = [h.index for h in headers if h.keyframe]
            expected = [i for i in range(len(headers)) if (i % window) % step == 0]
            assert keys == expected, cam.topic
    with pytest.raises(InputError, match="keyframe_s"):
        write_episode(
            small_episode, tmp_path / "bad.mcap", WriteOptions(video=VideoConfig(keyframe_s=0.0))
        )


def test_default_writer_records_no_keyframe_setting(
    small_episode: EpisodeData, tmp_path: Path
) -> None:
    path = tmp_path / "default.mcap"
    write_episode(small_episode, path, WriteOptions())
    with EpisodeReader(path) as reader:
        assert "keyframe_s" not in reader.info.video


def test_container_from_the_earlier_writer_reads_the_same() -> None:
    """tests/episodes/fixtures/grouped_2026-12-02.mcap was written by the writer before the
    keyframe interval and the decoding runs (synth_episode(5, 1, SMALL), default options)."""
    decoded = full_decode(FIXTURE)
    with EpisodeReader(FIXTURE) as reader:
        info = reader.info
        anchors = SPEC.anchors(info.start_ns, info.end_ns)
        for anchor in [*anchors[5:25], anchors[2], anchors[-1]]:
            sample = reader.read_sample(int(anchor), SPEC)
            for topic, frames in sample.frames.items():
                for k, time_ns in enumerate(sample.frame_ns[topic]):
                    if sample.frame_valid[topic][k]:
                        np.testing.assert_array_equal(frames[k], decoded[topic][int(time_ns)])
        times, values = reader.read_vectors("/action")
    fresh = synth_episode(5, 1, SMALL)
    actions = next(v for v in fresh.vectors if v.topic == "/action")
    np.testing.assert_array_equal(times, actions.timestamps_ns)
    np.testing.assert_array_equal(values, actions.values)


def test_writer_records_its_tune_and_refuses_an_unknown_one(
    small_episode: EpisodeData, tmp_path: Path
) -> None:
    for tune in ("fastdecode", None):
        path = tmp_path / f"{tune}.mcap"
        write_episode(small_episode, path, WriteOptions(video=VideoConfig(tune=tune)))
        with EpisodeReader(path) as reader:
            assert reader.info.video.get("tune") == tune
            anchor = int(SPEC.anchors(reader.info.start_ns, reader.info.end_ns)[7])
            assert reader.read_sample(anchor, SPEC).frame_valid["/cam/front"].all()
    with pytest.raises(InputError, match="tune"):
        VideoConfig(tune="fast")
