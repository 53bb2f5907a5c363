"""Building manifests: schema checks, sorting, offsets, determinism, atomic publication."""

from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifests import (
    REQUIRED_FIELDS,
    ManifestMeta,
    ManifestSchemaError,
    build_manifest,
    open_manifest,
)
from manifests.errors import ManifestError
from manifests.schema import lower_hex_digests


def test_build_writes_sorted_rows_with_offsets(make_table, meta, out_dir: Path) -> None:
    table = make_table([3, 0, 5, 2], slices_per_episode=2)
    info = build_manifest(table, meta, out_dir, batch_rows=3)
    manifest = open_manifest(info.path)
    got = manifest.table()
    assert got.schema.names[:8] == [f.name for f in REQUIRED_FIELDS]
    assert got.schema.names[8:] == ["task", "success"]
    assert got["episode_id"].to_pylist() == ["ep-000000"] * 2 + ["ep-000001"] * 2
    assert got["start_ns"].to_pylist() == [0, 10_000_000_000] * 2
    counts = got["num_samples"].to_pylist()
    assert got["sample_offset"].to_pylist() == list(np.cumsum(counts) - counts)
    assert info.num_samples == 10 == manifest.num_samples
    assert info.num_rows == 4 == manifest.num_rows
    assert manifest.num_batches == 2 and manifest.batch_rows == 3
    assert pa.types.is_string(got.schema.field("task").type)  # dictionary decoded


def test_id_is_sha256_of_bytes_and_name(make_table, meta, out_dir: Path) -> None:
    info = build_manifest(make_table([1, 2, 3]), meta, out_dir)
    data = info.path.read_bytes()
    assert info.manifest_id == hashlib.sha256(data).hexdigest()
    assert info.path.name == f"{info.manifest_id}.arrow"
    assert info.size_bytes == len(data)
    assert sorted(p.name for p in out_dir.iterdir()) == [info.path.name]  # no temp left


def test_metadata_changes_the_id(make_table, meta, out_dir: Path) -> None:
    table = make_table([1, 2, 3])
    first = build_manifest(table, meta, out_dir)
    other = ManifestMeta(sql=meta.sql, sample_spec=meta.sample_spec, snapshot_id=8)
    assert build_manifest(table, other, out_dir).manifest_id != first.manifest_id


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    counts=st.lists(st.integers(0, 50), max_size=40),
    seed=st.integers(0, 2**16),
    chunk=st.integers(1, 7),
    batch_rows=st.integers(1, 9),
)
def test_round_trip_is_order_and_chunking_independent(
    make_table, meta, tmp_path_factory, counts, seed, chunk, batch_rows
) -> None:
    out = tmp_path_factory.mktemp("rt")
    table = make_table(counts, slices_per_episode=2, seed=seed)
    rechunked = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), schema=table.schema)
    reference = make_table(counts, slices_per_episode=2, seed=seed + 1)
    a = build_manifest(rechunked, meta, out, batch_rows=batch_rows)
    b = build_manifest(reference, meta, out, batch_rows=batch_rows)
    assert a.manifest_id == b.manifest_id
    # Rows that come in the manifest's order skip the sort; rows sorted by episode alone
    # (slices in reverse) do not.
    in_order = reference.sort_by([("episode_id", "ascending"), ("start_ns", "ascending")])
    by_episode = reference.sort_by([("episode_id", "ascending"), ("start_ns", "descending")])
    for table_in in (in_order, by_episode):
        assert build_manifest(table_in, meta, out, batch_rows=batch_rows).manifest_id == (
            a.manifest_id
        )
    manifest = open_manifest(a.path)
    assert manifest.num_rows == len(counts)
    assert manifest.num_samples == sum(counts)
    got = manifest.table()
    expected = reference.sort_by([("episode_id", "ascending"), ("start_ns", "ascending")])
    for name in ("episode_id", "uri", "start_ns", "end_ns", "num_samples", "sha256"):
        assert got[name].to_pylist() == expected[name].to_pylist()
    assert manifest.meta == meta


def test_integer_and_large_string_inputs_are_cast(make_table, meta, out_dir: Path) -> None:
    table = make_table([1, 2])
    table = table.set_column(4, "num_samples", table["num_samples"].cast(pa.int32()))
    table = table.set_column(1, "uri", table["uri"].cast(pa.large_string()))
    manifest = open_manifest(build_manifest(table, meta, out_dir).path)
    assert manifest.schema.field("num_samples").type == pa.int64()
    assert manifest.schema.field("uri").type == pa.string()


def test_nested_dictionary_is_decoded(make_table, meta, out_dir: Path) -> None:
    table = make_table([1, 2], extra=False)
    tags = pa.array([["a"], ["b", "a"]], type=pa.list_(pa.dictionary(pa.int8(), pa.string())))
    manifest = open_manifest(build_manifest(table.append_column("tags", tags), meta, out_dir).path)
    assert manifest.schema.field("tags").type == pa.list_(pa.string())


@pytest.mark.parametrize(
    ("change", "column"),
    [
        (lambda t: t.drop_columns(["sha256"]), "sha256"),
        (lambda t: t.set_column(6, "sha256", pa.array(["ab"] * t.num_rows)), "sha256"),
        (lambda t: t.set_column(2, "start_ns", pa.array(["x"] * t.num_rows)), "start_ns"),
        (lambda t: t.set_column(4, "num_samples", pa.array([-1] * t.num_rows)), "num_samples"),
        (lambda t: t.set_column(3, "end_ns", pa.array([-1] * t.num_rows)), "end_ns"),
        (lambda t: t.set_column(1, "uri", pa.array([None] * t.num_rows, pa.string())), "uri"),
        (lambda t: t.set_column(5, "size_bytes", pa.array([2.5] * t.num_rows)), "size_bytes"),
        (lambda t: pa.concat_tables([t, t]), "start_ns"),
    ],
)
def test_bad_query_results_are_refused(make_table, meta, out_dir: Path, change, column) -> None:
    with pytest.raises(ManifestSchemaError) as caught:
        build_manifest(change(make_table([1, 2, 3])), meta, out_dir)
    assert caught.value.column == column
    assert list(out_dir.iterdir()) == []


def test_empty_result_builds_an_empty_manifest(make_table, meta, out_dir: Path) -> None:
    manifest = open_manifest(build_manifest(make_table([]), meta, out_dir).path)
    assert (manifest.num_rows, manifest.num_samples, manifest.num_batches) == (0, 0, 0)


def test_errors_pickle_with_their_attributes() -> None:
    error = ManifestSchemaError("bad", column="sha256", manifest_id="ab", retryable=True)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ManifestSchemaError and isinstance(copy, ManifestError)
    assert (copy.column, copy.manifest_id, copy.retryable) == ("sha256", "ab", True)
    assert str(copy) == str(error)


_DIGEST = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_HEXISH = st.text(alphabet="0123456789abcdefABCDEFgxyz \n\u00e9", min_size=62, max_size=66)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(_DIGEST, _DIGEST, _DIGEST, _HEXISH, st.none()), max_size=6),
    cut=st.integers(0, 6),
    offset=st.integers(0, 3),
)
def test_digest_check_agrees_with_the_regular_expression(
    values: list[str | None], cut: int, offset: int
) -> None:
    """The buffer-level check of sha256 values answers as ``^[0-9a-f]{64}$`` does, for any
    chunking and any array offset (a slice), nulls and multi-byte characters included."""
    good = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(offset)]
    array = pa.array(good + values, pa.string()).slice(offset)
    column = pa.chunked_array([array.slice(0, cut), array.slice(cut)], pa.string())
    expected = all(v is not None and re.fullmatch(r"[0-9a-f]{64}", v) for v in values)
    assert lower_hex_digests(column) == expected
    assert lower_hex_digests(column.cast(pa.large_string())) == expected
