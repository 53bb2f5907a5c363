"""Object-store access against local files and moto's S3 server on loopback."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from loader.config import StoreConfig
from loader.errors import LoaderError, ObjectNotFoundError, ObjectStoreError
from loader.store import ObjectStore

BUCKET = "quarry-test"
DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture(params=["file", "s3"])
def stored(request, tmp_path: Path) -> tuple[ObjectStore, str]:
    """An object holding DATA, in a local folder or in the S3 bucket."""
    if request.param == "file":
        path = tmp_path / "episode.mcap"
        path.write_bytes(DATA)
        return ObjectStore(), path.as_uri()
    config: StoreConfig = request.getfixturevalue("s3_config")
    store = ObjectStore(config)
    uri = f"s3://{BUCKET}/{tmp_path.name}/episode.mcap"
    fs, path = store.filesystem(uri)
    fs.pipe_file(path, DATA)
    return store, uri


def test_reads(stored: tuple[ObjectStore, str]) -> None:
    store, uri = stored
    assert store.size(uri) == len(DATA)
    assert store.read_all(uri) == DATA
    assert store.read_range(uri, 100, 50) == DATA[100:150]
    assert store.read_range(uri, len(DATA) - 10, 50) == DATA[-10:]
    assert b"".join(store.iter_blocks(uri, start=1000, block_bytes=999)) == DATA[1000:]
    with store.open(uri) as handle:
        handle.seek(5000)
        assert handle.read(10) == DATA[5000:5010]


def test_missing_object(stored: tuple[ObjectStore, str]) -> None:
    store, uri = stored
    with pytest.raises(ObjectNotFoundError) as caught:
        store.read_all(uri + ".missing")
    assert caught.value.retryable is False
    assert caught.value.uri == uri + ".missing"


def test_plain_path_is_a_local_file(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"abc")
    assert ObjectStore().read_all(str(path)) == b"abc"


def test_store_pickles_its_config_only(s3_config: StoreConfig) -> None:
    store = ObjectStore(s3_config)
    store.filesystem(f"s3://{BUCKET}/x")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.config == s3_config and copy._filesystems == {}


def test_bad_range_and_error_pickle() -> None:
    with pytest.raises(ObjectStoreError) as caught:
        ObjectStore().read_range("/nonexistent", -1, 5)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(copy, LoaderError) and copy.uri == "/nonexistent" and copy.retryable


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("alluxiofs://bucket/episode.mcap", "pip install alluxiofs"),
        ("nosuch://bucket/episode.mcap", "nosuch"),
    ],
)
def test_unusable_schemes_fail_clearly(uri: str, says: str) -> None:
    with pytest.raises(ObjectStoreError, match=says) as caught:
        ObjectStore().size(uri)
    assert caught.value.uri == uri and not caught.value.retryable
