"""Quality checks find each injected fault, from the data written to the container."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from episodes.episode import EpisodeData
from episodes.messages import unpack_frame
from episodes.quality import (
    CAMERA_BLACKOUT,
    CHOPPY_JOINTS,
    DECODE_FAILURE,
    DROPPED_FRAMES,
    FROZEN_FRAMES,
    check_episode,
    joint_figures,
    longest_run,
)
from episodes.reader import EpisodeReader
from episodes.synth import FAULT_KINDS, synth_episode

from .conftest import SHORT, write
from .rewrite import rewrite


def test_clean_episode_raises_no_flag(container: Path) -> None:
    with EpisodeReader(container) as reader:
        qc = check_episode(reader)
    assert qc.flags == []
    assert qc.report["flags"] == [] and qc.report["version"] == 1
    for figures in qc.report["cameras"].values():
        assert figures["frames"] == figures["expected_frames"]
        assert figures["decode_failures"] == 0


@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_each_injected_fault_is_flagged(fault: str, tmp_path: Path) -> None:
    episode = synth_episode(5, 3, SHORT, faults=(fault,))
    with EpisodeReader(write(tmp_path, episode)) as reader:
        qc = check_episode(reader)
    assert qc.flag_names == [fault]
    assert qc.flags[0].detail["topics"][0]["topic"]


def test_blackout_names_the_camera_and_duration(tmp_path: Path) -> None:
    episode = synth_episode(5, 4, SHORT, faults=(CAMERA_BLACKOUT,))
    black = [c for c in episode.cameras if (c.frames.reshape(len(c.frames), -1).max(1) == 0).any()]
    with EpisodeReader(write(tmp_path, episode)) as reader:
        (flag,) = check_episode(reader).flags
    (detail,) = flag.detail["topics"]
    assert detail["topic"] == black[0].topic
    assert 0.9 <= detail["seconds"] <= 2.1


def test_undecodable_frames_are_counted(container: Path, tmp_path: Path) -> None:
    def garble(topic: str, data: bytes) -> bytes:
        if topic != "/cam/front":
            return data
        header, payload = unpack_frame(data)
        if 65 <= header.index < 70:
            return data[:20] + bytes(range(256))[: len(payload)]
        return data

    damaged = rewrite(container, tmp_path / "garbled.mcap", edit=garble)
    with EpisodeReader(damaged) as reader:
        qc = check_episode(reader)
    assert DECODE_FAILURE in qc.flag_names
    assert qc.report["cameras"]["/cam/front"]["decode_failures"] >= 5
    assert qc.report["cameras"]["/cam/wrist"]["decode_failures"] == 0


def test_choppy_joint_figures() -> None:
    times = np.arange(0, 1_000_000_000, 10_000_000, dtype=np.int64)
    values = np.zeros((len(times), 2), dtype=np.float32)
    assert joint_figures(times, values, 100.0, jumps=True)["jumps"] == 0
    values[50, 1] = 0.5
    times[[20, 21]] = times[[21, 20]]
    times = np.delete(times, range(70, 80))
    values = np.delete(values, range(70, 80), axis=0)
    figures = joint_figures(times, values, 100.0, jumps=True)
    assert figures["jumps"] == 2  # up and back down
    assert figures["non_monotonic"] == 1
    assert figures["gaps"] == 1 and figures["max_gap_ms"] == pytest.approx(110.0)


def test_frozen_and_dropped_are_distinct(tmp_path: Path) -> None:
    found = {}
    for fault in (FROZEN_FRAMES, DROPPED_FRAMES, CHOPPY_JOINTS):
        episode: EpisodeData = synth_episode(9, 1, SHORT, faults=(fault,))
        with EpisodeReader(write(tmp_path, episode)) as reader:
            found[fault] = check_episode(reader).flag_names
    assert found == {f: [f] for f in found}


def test_longest_run() -> None:
    assert longest_run(np.array([], dtype=bool)) == 0
    assert longest_run(np.array([1, 1, 0, 1, 1, 1, 0], dtype=bool)) == 3
