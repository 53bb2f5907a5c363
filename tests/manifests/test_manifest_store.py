"""The manifest store (put/get/list/verify by ID) and manifest diffs."""

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
    ManifestNotFoundError,
    ManifestStore,
    build_manifest,
    diff_manifests,
)


def test_put_get_list_verify(make_table, meta, tmp_path: Path) -> None:
    built = build_manifest(make_table([1, 2, 3]), meta, tmp_path / "elsewhere")
    store = ManifestStore(tmp_path / "store")
    assert store.list() == []
    info = store.put(built.path)
    assert info.manifest_id == built.manifest_id
    assert store.contains(info.manifest_id)
    assert store.get(info.manifest_id).num_samples == 6
    assert [i.manifest_id for i in store.list()] == [info.manifest_id]
    store.verify(info.manifest_id)
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
        store.get("../../etc/passwd")
    with pytest.raises(ManifestNotFoundError):
        store.get("0" * 64)


def test_verify_in_store_detects_corruption(make_table, meta, tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    info = store.build(make_table([1, 2]), meta)
    info.path.write_bytes(info.path.read_bytes()[:-1] + b"\x01")
    with pytest.raises(ManifestCorruptError):
        store.verify(info.manifest_id)


def test_diff(make_table, meta: ManifestMeta, tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    old = make_table([1, 2, 3, 4])  # ep-000000 .. ep-000003
    new = make_table([1, 2, 3, 4, 5]).filter(
        pa.compute.not_equal(pa.compute.field("episode_id"), "ep-000000")
    )
    sha = new["sha256"].to_pylist()
    ids = new["episode_id"].to_pylist()
    sha[ids.index("ep-000002")] = "f" * 64
    new = new.set_column(6, "sha256", pa.array(sha))
    new_meta = ManifestMeta(sql=meta.sql, sample_spec=meta.sample_spec, snapshot_id=9)
    a = store.get(store.build(old, meta).manifest_id)
    b = store.get(store.build(new, new_meta).manifest_id)
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
