"""Build a manifest from a query result: check, sort, number the samples, write, publish."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ._publish import ID_SUFFIX, AtomicFile
from .errors import ManifestIOError, ManifestSchemaError
from .meta import ManifestMeta
from .schema import (
    EPISODE_ID,
    NUM_SAMPLES,
    REQUIRED_FIELDS,
    SAMPLE_OFFSET,
    START_NS,
    normalize_table,
)

DEFAULT_BATCH_ROWS = 65_536
"""Rows per record batch; every batch but the last holds exactly this many."""


@dataclass(frozen=True)
class ManifestInfo:
    """A published manifest.

    :param manifest_id: hex SHA-256 of the file's bytes.
    :param path: where the file lies (``<out_dir>/<manifest_id>.arrow``).
    :param num_rows: episode slices (rows).
    :param num_samples: samples over all slices.
    :param size_bytes: file size, bytes.
    """

    manifest_id: str
    path: Path
    num_rows: int
    num_samples: int
    size_bytes: int


def prepare_table(table: pa.Table, meta: ManifestMeta) -> pa.Table:
    """The exact table a manifest stores: checked, cast, sorted, with ``sample_offset``.

    Rows are sorted by (``episode_id``, ``start_ns``), a pair that must be unique;
    ``sample_offset`` is the exclusive cumulative sum of ``num_samples``.

    :raises ManifestSchemaError: the query result does not fit the manifest schema.
    """
    table = normalize_table(table).combine_chunks()
    if not _in_manifest_order(table):  # a curation's rows come ordered: no sort to redo
        table = table.sort_by([(EPISODE_ID, "ascending"), (START_NS, "ascending")])
    _check_unique_slices(table)
    counts = table[NUM_SAMPLES].to_numpy()
    ends = np.cumsum(counts, dtype=np.int64)
    offsets = pa.array(ends - counts, type=pa.int64())
    position = table.column_names.index(NUM_SAMPLES) + 1
    offset_field = next(f for f in REQUIRED_FIELDS if f.name == SAMPLE_OFFSET)
    table = table.add_column(position, offset_field, offsets)
    schema = table.schema.with_metadata(meta.to_metadata())
    return table.cast(schema)


def _in_manifest_order(table: pa.Table) -> bool:
    """Whether the rows are already sorted by (``episode_id``, ``start_ns``): one pass, where
    sorting 439k rows took 0.2-0.4 s."""
    if table.num_rows < 2:
        return True
    head, tail = slice(0, table.num_rows - 1), slice(1, table.num_rows)
    ids, starts = table[EPISODE_ID], table[START_NS]
    before = pc.less(ids[head], ids[tail])
    tied = pc.and_(pc.equal(ids[head], ids[tail]), pc.less_equal(starts[head], starts[tail]))
    return bool(pc.all(pc.or_(before, tied)).as_py())


def _check_unique_slices(table: pa.Table) -> None:
    if table.num_rows < 2:
        return
    ids, starts = table[EPISODE_ID], table[START_NS]
    same_id = pc.equal(ids.slice(1), ids.slice(0, table.num_rows - 1))
    same_start = pc.equal(starts.slice(1), starts.slice(0, table.num_rows - 1))
    if pc.any(pc.and_(same_id, same_start)).as_py():
        raise ManifestSchemaError("two slices share (episode_id, start_ns)", column=START_NS)


def build_manifest(
    table: pa.Table,
    meta: ManifestMeta,
    out_dir: str | os.PathLike[str],
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> ManifestInfo:
    """Write ``table`` as a manifest under ``out_dir`` and return what was published.

    The file is an uncompressed Arrow IPC file with record batches of ``batch_rows`` rows,
    named ``<sha256 of its bytes>.arrow``; it is written to a temp file, fsynced, and renamed
    into place, so readers never see a partial manifest. The bytes depend only on the rows
    (not their input order or chunking) and on ``meta``, so the same input gives the same ID.

    :raises ManifestSchemaError: the query result does not fit the manifest schema.
    :raises ManifestIOError: the file could not be written.
    """
    return write_prepared(prepare_table(table, meta), out_dir, batch_rows=batch_rows)


def write_prepared(
    prepared: pa.Table,
    out_dir: str | os.PathLike[str],
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> ManifestInfo:
    """Write a table :func:`prepare_table` returned as a manifest, as :func:`build_manifest`
    does (for a caller that uses the prepared rows too)."""
    if batch_rows < 1:
        raise ManifestSchemaError(f"batch_rows must be positive, got {batch_rows}")
    directory = Path(out_dir)
    options = ipc.IpcWriteOptions(compression=None, use_threads=False)
    try:
        with AtomicFile(directory) as atomic:
            with ipc.new_file(atomic.file, prepared.schema, options=options) as writer:
                writer.write_table(prepared, max_chunksize=batch_rows)
            manifest_id = atomic.file.hexdigest()
            size = atomic.file.tell()
            path = atomic.publish(manifest_id + ID_SUFFIX)
    except OSError as exc:
        raise ManifestIOError(f"cannot write manifest: {exc}", path=str(directory)) from exc
    num_samples = int(pc.sum(prepared[NUM_SAMPLES]).as_py() or 0)
    return ManifestInfo(manifest_id, path, prepared.num_rows, num_samples, size)
