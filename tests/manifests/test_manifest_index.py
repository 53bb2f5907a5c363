"""The sample index against a brute-force expansion of the slices (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifests import ManifestIndexError, build_manifest, open_manifest

_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=60).filter(lambda c: sum(c) > 0),
    batch_rows=st.integers(1, 8),
    data=st.data(),
)
def test_locate_matches_brute_force(make_table, meta, tmp_path_factory, counts, batch_rows, data):
    path = build_manifest(
        make_table(counts), meta, tmp_path_factory.mktemp("ix"), batch_rows=batch_rows
    ).path
    manifest = open_manifest(path)
    # Rows are sorted by episode id, which here is the input position.
    rows = np.repeat(np.arange(len(counts)), counts)
    within = np.concatenate([np.arange(c) for c in counts])
    total = int(sum(counts))
    picks = np.asarray(data.draw(st.lists(st.integers(0, total - 1), max_size=30)), dtype=np.int64)
    got_rows, got_within = manifest.index.locate_many(picks)
    np.testing.assert_array_equal(got_rows, rows[picks])
    np.testing.assert_array_equal(got_within, within[picks])
    sample = data.draw(st.integers(0, total - 1))
    assert manifest.locate(sample) == (rows[sample], within[sample])
    offsets = manifest.index.row_offsets()
    assert offsets.tolist() == [*np.cumsum([0, *counts])[:-1].tolist(), total]


def test_locate_outside_the_range_fails(make_table, meta, out_dir) -> None:
    manifest = open_manifest(build_manifest(make_table([2, 3]), meta, out_dir).path)
    for bad in (-1, 5):
        with pytest.raises(ManifestIndexError):
            manifest.locate(bad)
    with pytest.raises(ManifestIndexError):
        manifest.index.locate_many([0, 5])


def test_locate_many_keeps_the_input_shape(make_table, meta, out_dir) -> None:
    manifest = open_manifest(build_manifest(make_table([2, 3]), meta, out_dir, batch_rows=1).path)
    rows, within = manifest.index.locate_many(np.array([[4, 0], [2, 1]]))
    assert rows.tolist() == [[1, 0], [1, 0]]
    assert within.tolist() == [[2, 0], [0, 1]]
