"""Manifests in S3 (moto's server on loopback): published whole by a conditional PUT, never
overwritten, opened and read by byte ranges, listed and deleted; bad locations are clear
errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manifests import ManifestIdError, ManifestIOError, ManifestNotFoundError, build_manifest
from manifests.objects import ObjectManifestStore
from tests.fixtures.s3 import KEY, SECRET, moto_s3

BUCKET = "manifests"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with moto_s3(BUCKET) as client:
        yield client


def store_of(s3: Any, prefix: str) -> ObjectManifestStore:
    options = {
        "endpoint_url": f"http://{s3.endpoint}",
        "key": KEY,
        "secret": SECRET,
        "config_kwargs": {"s3": {"addressing_style": "path"}},
    }
    return ObjectManifestStore(f"s3://{BUCKET}/{prefix}", options)


def test_a_published_manifest_opens_and_reads_by_ranges(
    s3: Any, make_table: Any, meta: Any, tmp_path: Path
) -> None:
    store = store_of(s3, "a")
    with store.staging() as folder:
        info = build_manifest(make_table([1, 2, 3]), meta, folder)
        uri = store.publish(info)
        assert store.publish(info) == uri  # the same bytes again: kept, one object
        data = info.path.read_bytes()
    assert not folder.exists()  # the local copy went with the scratch folder
    assert uri == store.uri(info.manifest_id) == f"s3://{BUCKET}/a/{info.manifest_id}.arrow"
    assert store.exists(uri) and store.size(uri) == len(data)
    manifest = store.open_manifest(uri)
    assert manifest.manifest_id == info.manifest_id
    assert (manifest.num_rows, manifest.num_samples) == (3, 6)
    assert manifest.meta == meta
    assert manifest.table().num_rows == 3
    assert b"".join(store.iter_bytes(uri, 10, 50)) == data[10:50]
    assert [o.manifest_id for o in store.list()] == [info.manifest_id]


def test_an_existing_object_is_never_overwritten(
    s3: Any, make_table: Any, meta: Any, tmp_path: Path
) -> None:
    store = store_of(s3, "b")
    info = build_manifest(make_table([4]), meta, tmp_path)
    key = f"b/{info.manifest_id}.arrow"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"someone else's bytes")
    with pytest.raises(ManifestIOError, match="holds 20 bytes"):
        store.publish(info)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"someone else's bytes"


def test_delete_and_what_is_listed(s3: Any, make_table: Any, meta: Any, tmp_path: Path) -> None:
    store = store_of(s3, "c")
    info = build_manifest(make_table([1]), meta, tmp_path)
    uri = store.publish(info)
    s3.put_object(Bucket=BUCKET, Key="c/notes.txt", Body=b"x")
    assert [o.manifest_id for o in store.list()] == [info.manifest_id]
    store.delete(uri)
    store.delete(uri)  # gone already: nothing to do
    assert store.list() == [] and not store.exists(uri)
    assert store_of(s3, "never-written").list() == []


def test_bad_locations_are_clear_errors(s3: Any) -> None:
    store = store_of(s3, "d")
    with pytest.raises(ManifestIOError, match="s3://bucket"):
        ObjectManifestStore("/var/lib/quarry/manifests")
    with pytest.raises(ManifestIdError):
        store.uri("../../etc/passwd")
    missing = store.uri("0" * 64)
    assert not store.exists(missing)
    with pytest.raises(ManifestNotFoundError):
        store.open_manifest(missing)
    for outside in (f"s3://{BUCKET}/e/{'0' * 64}.arrow", "/etc/passwd"):
        assert not store.exists(outside)
        with pytest.raises(ManifestNotFoundError, match="not a manifest object of this store"):
            store.open_manifest(outside)
