"""Shared episodes for the container tests: written once per module, real codecs throughout."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.episode import EpisodeData
from episodes.synth import FleetConfig, synth_episode
from episodes.writer import WriteOptions, write_episode

#: Short episodes keep the suite fast on two cores; everything else is the fleet's default.
SHORT = FleetConfig(duration_s=(6.0, 7.0))


def write(tmp: Path, episode: EpisodeData, options: WriteOptions | None = None) -> Path:
    path = tmp / f"{episode.episode_id}.mcap"
    write_episode(episode, path, options or WriteOptions())
    return path


@pytest.fixture(scope="module")
def episode() -> EpisodeData:
    """A three-camera episode (robot koi-*) without faults."""
    for index in range(50):
        ep = synth_episode(11, index, SHORT, faults=())
        if len(ep.cameras) == 3:
            return ep
    raise AssertionError("no three-camera robot in the first 50 episodes")


@pytest.fixture(scope="module")
def container(episode: EpisodeData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("container"), episode)
