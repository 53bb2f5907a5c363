"""Fixtures for the loader tests: moto's S3 server on loopback, objects, manifests, caches,
and a server of the service's manifest download contract."""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from moto.server import ThreadedMotoServer

from loader.cache import ObjectRef
from loader.config import CacheConfig, StoreConfig
from loader.store import ObjectStore
from tests.fixtures.manifest_server import ManifestServer, serve_manifests

BUCKET = "quarry-test"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_config() -> Iterator[StoreConfig]:
    """moto's S3 server on a free loopback port, with bucket ``quarry-test``."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    config = StoreConfig(
        s3_endpoint_url=f"http://127.0.0.1:{port}",
        s3_key="testing",
        s3_secret="testing",  # type: ignore[arg-type]
        s3_region="us-east-2",
    )
    fs, _ = ObjectStore(config).filesystem(f"s3://{BUCKET}")
    fs.mkdir(BUCKET)
    yield config
    server.stop()


@dataclass
class ObjectFactory:
    """Writes objects with pseudo-random bytes and returns references to them."""

    root: Path

    @staticmethod
    def payload(size: int, seed: int = 0) -> bytes:
        """The bytes :meth:`local` writes for ``(size, seed)``."""
        return payload(size, seed)

    @staticmethod
    def sha(data: bytes) -> str:
        """Hex SHA-256 of ``data``."""
        return sha(data)

    def local(self, name: str, size: int, seed: int = 0) -> ObjectRef:
        data = payload(size, seed)
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return ObjectRef(uri=path.as_uri(), sha256=sha(data), size=size, episode_id=name)


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes."""
    block = hashlib.sha256(f"{seed}".encode()).digest() * (size // 32 + 1)
    return block[:size]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def objects(tmp_path: Path) -> ObjectFactory:
    """Factory of local objects under ``tmp_path/objects``."""
    return ObjectFactory(tmp_path / "objects")


@pytest.fixture
def cache_config(tmp_path: Path) -> Callable[..., CacheConfig]:
    """Factory: ``cache_config(capacity_bytes=..., **more)`` rooted at ``tmp_path/cache``."""

    def make(**values: object) -> CacheConfig:
        return CacheConfig(root=tmp_path / "cache", **values)  # type: ignore[arg-type]

    return make


def object_table(refs: list[ObjectRef], samples: int = 4) -> pa.Table:
    """A query result with one slice per object."""
    n = len(refs)
    return pa.table(
        {
            "episode_id": [r.episode_id or f"ep-{i}" for i, r in enumerate(refs)],
            "uri": [r.uri for r in refs],
            "start_ns": [0] * n,
            "end_ns": [10**9] * n,
            "num_samples": [samples] * n,
            "size_bytes": [r.size for r in refs],
            "sha256": [r.sha256 for r in refs],
        }
    )


SPEC = {
    "control_hz": 50.0,
    "frames_per_camera": 2,
    "frame_stride": 1,
    "state_history": 4,
    "action_horizon": 8,
    "anchor_stride": 25,
}
STATE_DIMS, ACTION_DIMS = 13, 7


def norm_stats(mean: float, std: float) -> dict[str, dict[str, object]]:
    """Statistics whose every dimension has this mean and standard deviation."""

    def field(dims: int) -> dict[str, object]:
        count = 4
        return {
            "count": count,
            "sum": [mean * count] * dims,
            "sum_sq": [count * (std**2 + mean**2)] * dims,
        }

    return {"state": field(STATE_DIMS), "action": field(ACTION_DIMS)}


@dataclass(frozen=True)
class EpisodeSet:
    """Small real episode containers and manifests over them.

    :param good: manifest over the good episodes.
    :param with_bad: the same plus a truncated (corrupt) container, whose SHA-256 matches
        its corrupt bytes so only the reader can tell.
    """

    good: Path
    with_bad: Path
    bad_episode: str
    containers: list[Path]


@pytest.fixture(scope="session")
def episode_set(tmp_path_factory: pytest.TempPathFactory) -> EpisodeSet:
    """Four synthetic episodes (2 cameras of 32x24 at 10 Hz, 2-3 s each) and manifests."""
    from episodes.spec import SampleSpec
    from episodes.synth import FleetConfig, synth_episode
    from episodes.writer import WriteOptions, write_episode
    from manifests import ManifestMeta, build_manifest

    root = tmp_path_factory.mktemp("episodes")
    fleet = FleetConfig(
        width=32,
        height=24,
        cameras=(("front", 10.0), ("wrist", 10.0)),
        duration_s=(2.0, 3.0),
        fault_rate=0.0,
    )
    spec = SampleSpec.from_dict(SPEC)
    rows, paths = [], []
    for index in range(4):
        episode = synth_episode(7, index, fleet)
        path = root / f"{episode.episode_id}.mcap"
        write_episode(episode, path, WriteOptions(window_s=1.0))
        rows.append(_row(episode.episode_id, path, episode.start_ns, episode.end_ns, spec))
        paths.append(path)
    good_table = pa.Table.from_pylist(rows)
    bad_path = root / "bad.mcap"
    bad_path.write_bytes(paths[0].read_bytes()[: paths[0].stat().st_size // 2])
    bad = _row("bad-episode", bad_path, rows[0]["start_ns"], rows[0]["end_ns"], spec)
    meta = ManifestMeta(
        sql="SELECT * FROM episodes", sample_spec=SPEC, norm_stats=norm_stats(1.0, 2.0)
    )
    good = build_manifest(good_table, meta, root / "manifests").path
    with_bad = build_manifest(pa.Table.from_pylist([*rows, bad]), meta, root / "manifests").path
    return EpisodeSet(good, with_bad, "bad-episode", paths)


def _row(episode_id: str, path: Path, start_ns: int, end_ns: int, spec) -> dict[str, object]:
    data = path.read_bytes()
    return {
        "episode_id": episode_id,
        "uri": path.as_uri(),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "num_samples": spec.count_samples(start_ns, end_ns),
        "size_bytes": len(data),
        "sha256": sha(data),
    }


@dataclass(frozen=True)
class Corpus:
    """A manifest to bring onto a node: the good manifest of :func:`episode_set`."""

    manifest_path: Path
    manifest_id: str
    num_samples: int


@pytest.fixture(scope="session")
def corpus(episode_set: EpisodeSet) -> Corpus:
    """The episode set's good manifest, by path, ID and sample count."""
    from manifests import open_manifest

    manifest = open_manifest(episode_set.good)
    return Corpus(episode_set.good, manifest.verify(), manifest.num_samples)


@pytest.fixture
def manifest_server(corpus: Corpus) -> Iterator[ManifestServer]:
    """The service's manifest download contract, serving the corpus manifest."""
    with serve_manifests({corpus.manifest_id: corpus.manifest_path.read_bytes()}) as server:
        yield server
