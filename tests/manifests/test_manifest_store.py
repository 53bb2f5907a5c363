"""The manifest store (path and verified put by ID) and manifest diffs."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest

from manifests import (
    ManifestCorruptError,
    ManifestFormatError,
    ManifestIdError,
    ManifestMeta,
    ManifestStore,
    build_manifest,
    diff_manifests,
    open_manifest,
)


def test_put_then_open_by_id(make_table, meta, tmp_path: Path) -> None:
    built = build_manifest(make_table([1, 2, 3]), meta, tmp_path / "elsewhere")
    store = ManifestStore(tmp_path / "store")
    assert not store.contains(built.manifest_id)
    info = store.put(built.path)
    assert info.manifest_id == built.manifest_id
    assert store.contains(info.manifest_id)
    assert open_manifest(store.path(info.manifest_id)).num_samples == 6
    assert [p.name for p in (tmp_path / "store").iterdir()] == [info.path.name]
    assert open_manifest(info.path).verify() == info.manifest_id
    again = store.put(io.BytesIO(built.path.read_bytes()), expected_id=built.manifest_id)
    assert again.path == info.path
    assert len(list((tmp_path / "store").iterdir())) == 1


def test_put_refuses_wrong_bytes(make_table, meta, tmp_path: Path) -> None:
    built = build_manifest(make_table([1, 2]), meta, tmp_path / "a")
    store = ManifestStore(tmp_path / "store")
    with pytest.raises(ManifestCorruptError):
        store.put(built.path.read_bytes() + b"x", expected_id=built.manifest_id)
    with pytest.raises(ManifestFormatError):
        store.put(b"garbage")
    assert list((tmp_path / "store").iterdir()) == []


def test_ids_are_checked(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    with pytest.raises(ManifestIdError):
        store.path("../../etc/passwd")
    with pytest.raises(ManifestIdError):
        store.put(b"", expected_id="../../etc/passwd")
    assert not store.contains("0" * 64)


def test_verify_detects_corruption(make_table, meta, tmp_path: Path) -> None:
    info = build_manifest(make_table([1, 2]), meta, tmp_path)
    data = info.path.read_bytes()
    assert b"ep-000001" in data  # values in a record batch: the file still opens
    info.path.write_bytes(data.replace(b"ep-000001", b"ep-000009"))
    with pytest.raises(ManifestCorruptError):
        open_manifest(info.path).verify()


def test_diff(make_table, meta: ManifestMeta, tmp_path: Path) -> None:
    old = make_table([1, 2, 3, 4])  # ep-000000 .. ep-000003
    new = make_table([1, 2, 3, 4, 5]).filter(
        pa.compute.not_equal(pa.compute.field("episode_id"), "ep-000000")
    )
    sha = new["sha256"].to_pylist()
    ids = new["episode_id"].to_pylist()
    sha[ids.index("ep-000002")] = "f" * 64
    new = new.set_column(6, "sha256", pa.array(sha))
    new_meta = ManifestMeta(sql=meta.sql, sample_spec=meta.sample_spec, snapshot_id=9)
    a = open_manifest(build_manifest(old, meta, tmp_path).path)
    b = open_manifest(build_manifest(new, new_meta, tmp_path).path)
    diff = diff_manifests(a, b)
    assert diff.added == ["ep-000004"]
    assert diff.removed == ["ep-000000"]
    assert diff.changed == ["ep-000002"]
    assert diff.unchanged == 2
    assert diff.metadata["snapshot_id"] == (7, 9)
    assert set(diff.metadata) == {"snapshot_id", "cdc_position", "norm_stats"}
    assert diff.samples == (10, 14)
    assert diff.to_dict()["rows"] == {"a": 4, "b": 4}
    assert diff_manifests(a, a).is_empty
