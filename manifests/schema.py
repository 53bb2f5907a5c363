"""The manifest's fixed columns, metadata keys, and the checks a query result must pass."""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import ManifestSchemaError

FORMAT_VERSION: Final = 2
"""Version written under ``quarry.format_version`` (version 2: ``quarry.cdc_position`` is a
JSON object; version 1 held that object's JSON text as a JSON string)."""
SUPPORTED_VERSIONS: Final = (1, 2)
"""Versions that open and rebuild byte-identical; readers refuse any other."""

META_PREFIX: Final = "quarry."
KEY_FORMAT_VERSION: Final = b"quarry.format_version"
KEY_SQL: Final = b"quarry.sql"
KEY_SAMPLE_SPEC: Final = b"quarry.sample_spec"
KEY_SNAPSHOT_ID: Final = b"quarry.snapshot_id"
KEY_CDC_POSITION: Final = b"quarry.cdc_position"
KEY_NORM_STATS: Final = b"quarry.norm_stats"

EPISODE_ID: Final = "episode_id"
URI: Final = "uri"
START_NS: Final = "start_ns"
END_NS: Final = "end_ns"
NUM_SAMPLES: Final = "num_samples"
SAMPLE_OFFSET: Final = "sample_offset"
SIZE_BYTES: Final = "size_bytes"
SHA256: Final = "sha256"

REQUIRED_FIELDS: Final = (
    pa.field(EPISODE_ID, pa.string(), nullable=False),
    pa.field(URI, pa.string(), nullable=False),
    pa.field(START_NS, pa.int64(), nullable=False),
    pa.field(END_NS, pa.int64(), nullable=False),
    pa.field(NUM_SAMPLES, pa.int64(), nullable=False),
    pa.field(SAMPLE_OFFSET, pa.int64(), nullable=False),
    pa.field(SIZE_BYTES, pa.int64(), nullable=False),
    pa.field(SHA256, pa.string(), nullable=False),
)
"""The fixed leading columns, in file order; extra curation columns follow them."""

REQUIRED_NAMES: Final = tuple(f.name for f in REQUIRED_FIELDS)
INPUT_NAMES: Final = tuple(n for n in REQUIRED_NAMES if n != SAMPLE_OFFSET)
"""Columns a query result must provide (``sample_offset`` is computed by the builder)."""

MAX_EXTRA_COLUMNS: Final = 256


def has_dictionary(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` is, or nests, a dictionary type."""
    if pa.types.is_dictionary(dtype):
        return True
    return any(has_dictionary(dtype.field(i).type) for i in range(dtype.num_fields))


def undictionary(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every dictionary (top-level or nested) replaced by its value type."""
    if pa.types.is_dictionary(dtype):
        return undictionary(dtype.value_type)
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(undictionary(f.type)) for f in dtype])
    if pa.types.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(undictionary(dtype.value_type)))
    if pa.types.is_fixed_size_list(dtype):
        field = dtype.value_field.with_type(undictionary(dtype.value_type))
        return pa.list_(field, dtype.list_size)
    if pa.types.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(undictionary(dtype.value_type)))
    if has_dictionary(dtype):
        raise ManifestSchemaError(f"cannot remove the dictionary encoding of type {dtype}")
    return dtype


def _coerce_required(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    """Cast a required column to its fixed type, refusing lossy casts and nulls."""
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
        column = column.cast(dtype)
    is_text = pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
    if field.type == pa.string() and not is_text:
        raise ManifestSchemaError(f"must be a string column, got {dtype}", column=field.name)
    if field.type == pa.int64() and not pa.types.is_integer(dtype):
        raise ManifestSchemaError(f"must be an integer column, got {dtype}", column=field.name)
    if column.null_count:
        raise ManifestSchemaError(f"has {column.null_count} nulls", column=field.name)
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ManifestSchemaError(f"cannot cast to {field.type}: {exc}", column=field.name) from exc


def _check_values(table: pa.Table) -> None:
    """Value checks: non-negative counts and sizes, ordered slices, hex SHA-256 digests."""
    if table.num_rows == 0:
        return
    for name in (NUM_SAMPLES, SIZE_BYTES):
        if pc.min(table[name]).as_py() < 0:
            raise ManifestSchemaError("has negative values", column=name)
    if not pc.all(pc.less_equal(table[START_NS], table[END_NS])).as_py():
        raise ManifestSchemaError("has a row with start_ns > end_ns", column=END_NS)
    if not lower_hex_digests(table[SHA256]):
        raise ManifestSchemaError("must hold 64 lowercase hex digits per row", column=SHA256)
    if pc.min(pc.utf8_length(table[EPISODE_ID])).as_py() == 0:
        raise ManifestSchemaError("has an empty episode id", column=EPISODE_ID)


def lower_hex_digests(column: pa.ChunkedArray) -> bool:
    """Whether every value of a string column is 64 lowercase hex digits (``[0-9a-f]{64}``),
    read off the Arrow buffers: a fifth of the regular expression's time (0.1 s at 439k
    rows)."""
    if column.null_count:
        return False
    if not pa.types.is_string(column.type):  # the buffers below are read as 32-bit offsets
        matches = pc.match_substring_regex(column, r"^[0-9a-f]{64}$")
        return len(column) == 0 or bool(pc.all(matches).as_py())
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        offsets = np.frombuffer(
            chunk.buffers()[1], dtype=np.int32, count=len(chunk) + 1, offset=chunk.offset * 4
        )
        if not bool((np.diff(offsets) == 64).all()):
            return False
        data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        digit = (data >= ord("0")) & (data <= ord("9"))
        letter = (data >= ord("a")) & (data <= ord("f"))
        if not bool((digit | letter).all()):
            return False
    return True


def normalize_table(table: pa.Table) -> pa.Table:
    """Check a query result and cast it to the manifest schema (without ``sample_offset``).

    Required columns are cast to their fixed types (integers to int64, large strings to
    string); dictionary columns are decoded to their value type; an input ``sample_offset``
    column is dropped, because the builder computes it. Extra columns keep their order.

    :raises ManifestSchemaError: a column is missing, duplicated, mistyped or invalid.
    """
    names = table.column_names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ManifestSchemaError("duplicate column names", column=", ".join(duplicates))
    missing = [n for n in INPUT_NAMES if n not in names]
    if missing:
        raise ManifestSchemaError("missing required columns", column=", ".join(missing))
    extras = [n for n in names if n not in REQUIRED_NAMES]
    if len(extras) > MAX_EXTRA_COLUMNS:
        raise ManifestSchemaError(f"more than {MAX_EXTRA_COLUMNS} extra columns")
    fields = {f.name: f for f in REQUIRED_FIELDS}
    arrays = [_coerce_required(table[n], fields[n]) for n in INPUT_NAMES]
    out_fields = [fields[n] for n in INPUT_NAMES]
    for name in extras:
        column = table[name]
        plain = undictionary(column.type)
        arrays.append(column.cast(plain) if plain != column.type else column)
        out_fields.append(pa.field(name, plain, nullable=True))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(out_fields))
    _check_values(out)
    return out
