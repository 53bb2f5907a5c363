"""Query results on the wire: an Arrow IPC stream, or JSON.

JSON has no type for several Arrow values; they are written as: timestamps, dates and times
in ISO 8601; durations in seconds; decimals as strings (no precision lost); binary as base64;
maps as ``[key, value]`` pairs; NaN and infinities as the strings ``"NaN"``, ``"Infinity"``
and ``"-Infinity"`` (as in protobuf's JSON mapping).
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

ARROW_STREAM = "application/vnd.apache.arrow.stream"
SNAPSHOT_HEADER = "X-Quarry-Snapshot-Id"
"""The response header naming the warehouse snapshot a query read."""


def to_ipc_stream(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream (schema, then its record batches)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def column_types(table: pa.Table) -> list[dict[str, str]]:
    """Each column's name and Arrow type, in order."""
    return [{"name": field.name, "type": str(field.type)} for field in table.schema]


def json_rows(table: pa.Table) -> list[list[Any]]:
    """The rows of ``table`` as lists of JSON values (duplicate column names kept)."""
    columns = [_json_values(column.to_pylist()) for column in table.columns]
    return [list(row) for row in zip(*columns, strict=True)] if columns else []


def _json_values(values: list[Any]) -> Iterator[Any]:
    return (json_value(value) for value in values)


def json_value(value: Any) -> Any:
    """One Arrow value (as ``to_pylist`` gives it) as a JSON value."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return str(value)


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"
