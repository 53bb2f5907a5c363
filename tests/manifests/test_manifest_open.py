"""Opening manifests: lazy memory map, metadata accessors, rows, pickling, bad files."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from manifests import (
    ManifestCorruptError,
    ManifestFormatError,
    ManifestIndexError,
    ManifestMeta,
    ManifestNotFoundError,
    build_manifest,
    open_manifest,
)
from manifests.errors import ManifestSchemaError


def test_metadata_accessors(make_table, meta: ManifestMeta, out_dir: Path) -> None:
    info = build_manifest(make_table([1, 2, 3]), meta, out_dir)
    manifest = open_manifest(info.path)
    assert manifest.manifest_id == info.manifest_id
    assert manifest.sql == "SELECT * FROM episodes"
    assert manifest.sample_spec == {"anchor_stride": 5, "control_hz": 50.0}
    assert manifest.snapshot_id == 7
    assert manifest.cdc_position == {"lsn": 23803720, "lsn_text": "0/16B3748", "slot": "quarry_cdc"}
    assert manifest.norm_stats == meta.norm_stats
    assert manifest.extra_columns == ["task", "success"]
    state = manifest.field_stats("state")
    assert state is not None
    np.testing.assert_allclose(state.mean(), [1.0, 2.0])
    np.testing.assert_allclose(state.std(), [1.0, 1.0])
    assert manifest.field_stats("missing") is None


def test_open_reads_no_more_than_first_and_last_batch(make_table, meta, out_dir: Path) -> None:
    info = build_manifest(make_table([1] * 100), meta, out_dir, batch_rows=4)
    manifest = open_manifest(info.path)
    assert manifest.num_batches == 25
    assert sorted(manifest._batches) == [0, 24]
    assert manifest.num_rows == 100 and manifest.num_samples == 100


def test_columns_are_zero_copy_views_of_the_map(make_table, meta, out_dir: Path) -> None:
    manifest = open_manifest(build_manifest(make_table([1, 2, 3]), meta, out_dir).path)
    before = pa.total_allocated_bytes()
    view = manifest.column_view(0, "sample_offset")
    assert pa.total_allocated_bytes() == before
    assert not view.flags.writeable
    assert view.tolist() == [0, 1, 3]


def test_row_record(make_table, meta, out_dir: Path) -> None:
    manifest = open_manifest(build_manifest(make_table([4, 5]), meta, out_dir, batch_rows=1).path)
    row = manifest.row(1)
    assert (row.row, row.episode_id, row.num_samples, row.sample_offset) == (1, "ep-000001", 5, 4)
    assert row.extra == {"task": "task-1", "success": False}
    with pytest.raises(ManifestIndexError):
        manifest.row(2)


def test_pickle_carries_the_path_not_the_table(make_table, meta, out_dir: Path) -> None:
    manifest = open_manifest(build_manifest(make_table([1] * 50), meta, out_dir).path)
    data = pickle.dumps(manifest)
    assert len(data) < 400
    copy = pickle.loads(data)
    assert copy.path == manifest.path and copy.num_samples == 50


def test_verify_detects_a_changed_byte(make_table, meta, out_dir: Path) -> None:
    info = build_manifest(make_table([1, 2]), meta, out_dir)
    assert open_manifest(info.path).verify() == info.manifest_id
    data = bytearray(info.path.read_bytes())
    data[200] ^= 0xFF
    info.path.write_bytes(bytes(data))
    with pytest.raises(ManifestCorruptError) as caught:
        open_manifest(info.path).verify()
    assert caught.value.manifest_id == info.manifest_id


def test_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestNotFoundError):
        open_manifest(tmp_path / "nope.arrow")
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all")
    with pytest.raises(ManifestFormatError):
        open_manifest(junk)
    plain = tmp_path / "plain.arrow"
    table = pa.table({"x": [1, 2]})
    with ipc.new_file(str(plain), table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(ManifestFormatError):
        open_manifest(plain)


def test_unsupported_version_is_refused(make_table, meta, out_dir: Path) -> None:
    newer = ManifestMeta(sql="SELECT 1", format_version=99)
    path = build_manifest(make_table([1]), newer, out_dir).path
    with pytest.raises(ManifestFormatError, match="version"):
        open_manifest(path)


def _touch_every_page(manifest) -> int:
    """Read one byte of every page of every column buffer; return the bytes covered."""
    covered = 0
    for b in range(manifest.num_batches):
        for column in manifest.batch(b).columns:
            for buffer in column.buffers():
                if buffer is not None and buffer.size:
                    int(np.frombuffer(buffer, dtype=np.uint8)[::4096].sum())
                    covered += buffer.size
    return covered


def _mapping_kib(pid: int, path: str) -> tuple[int, int]:
    """(Rss, Pss) of process ``pid``'s mappings of file ``path``, KiB (from its smaps)."""
    totals = {"Rss:": 0, "Pss:": 0}
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not line[:1].isupper():  # a mapping's header line: address range, ..., pathname
            inside = fields[-1] == path
        elif inside and fields[0] in totals:
            totals[fields[0]] += int(fields[1])
    return totals["Rss:"], totals["Pss:"]


def _map_and_hold(path: str, ready, release) -> None:
    manifest = open_manifest(path)
    _touch_every_page(manifest)
    ready.put(os.getpid())
    release.wait(60)


def test_ranks_mapping_one_manifest_share_one_copy(make_table, meta, out_dir: Path) -> None:
    info = build_manifest(make_table([3] * 60_000, extra=False), meta, out_dir)
    size_kib = info.size_bytes / 1024
    context = multiprocessing.get_context("fork")
    ready, release = context.Queue(), context.Event()
    ranks = [
        context.Process(target=_map_and_hold, args=(str(info.path), ready, release))
        for _ in range(4)
    ]
    for rank in ranks:
        rank.start()
    try:
        pids = [ready.get(timeout=60) for _ in ranks]
        # PSS splits each shared page among the processes that map it; read while all hold it.
        usage = [_mapping_kib(pid, str(info.path)) for pid in pids]
    finally:
        release.set()
        for rank in ranks:
            rank.join(timeout=30)
    assert all(rss > 0.95 * size_kib for rss, _ in usage)  # every rank has every page
    assert 0.95 * size_kib < sum(pss for _, pss in usage) < 1.05 * size_kib  # one copy of them


def test_column_view_respects_slices_and_refuses_other_columns(
    make_table, meta, out_dir: Path
) -> None:
    manifest = open_manifest(build_manifest(make_table([1] * 10), meta, out_dir, batch_rows=4).path)
    assert [manifest.column_view(b, "sample_offset").tolist() for b in range(3)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    with pytest.raises(ManifestSchemaError):
        manifest.column_view(0, "uri")


def test_locating_a_sample_does_not_import_pandas(make_table, meta, out_dir: Path) -> None:
    # pandas costs about 0.6 s to import, in every process (DataLoader workers too).
    path = build_manifest(make_table([3] * 5), meta, out_dir).path
    probe = (
        "import sys; from manifests.manifest import open_manifest; "
        f"m = open_manifest({str(path)!r}); assert m.locate(7) == (2, 1), m.locate(7); "
        "print('pandas' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
