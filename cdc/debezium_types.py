"""Debezium's JSON encodings of column values, decoded for a warehouse column type.

Debezium's PostgreSQL connector encodes a value by its Kafka Connect type and semantic type
(the field schema's ``name``): ``timestamptz`` as an ISO string (``io.debezium.time.
ZonedTimestamp``), ``timestamp`` as integer microseconds (``MicroTimestamp``; milliseconds
for ``Timestamp``, nanoseconds for ``NanoTimestamp``), ``date`` as integer days
(``io.debezium.time.Date``), ``uuid`` and ``json(b)`` as strings, ``numeric`` as base64
big-endian unscaled bytes with a ``scale`` parameter (``org.apache.kafka.connect.data.
Decimal``) or a ``{scale, value}`` struct (``VariableScaleDecimal``), or as a string or double
when ``decimal.handling.mode`` says so, ``bytea`` as base64. Without the schema wrapper the
warehouse column's type decides, with those defaults.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

#: Debezium's default ``unavailable.value.placeholder`` (an unchanged TOAST value).
UNAVAILABLE = "__debezium_unavailable_value"
#: The same placeholder as a ``bytea`` column carries it (base64 of its bytes).
UNAVAILABLE_BYTES = base64.b64encode(UNAVAILABLE.encode()).decode()
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PER_SECOND = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
_INTEGERS = {"BIGINT", "INTEGER", "SMALLINT", "UBIGINT", "TINYINT", "HUGEINT"}
_FLOATS = {"DOUBLE", "FLOAT", "REAL"}


def is_unavailable(value: Any) -> bool:
    """Whether ``value`` is Debezium's placeholder for an unchanged TOAST value: the string,
    a text array of it alone, or its bytes in base64 (Quarry expects Debezium's default
    ``unavailable.value.placeholder``)."""
    if isinstance(value, list):
        return value == [UNAVAILABLE]
    return value in (UNAVAILABLE, UNAVAILABLE_BYTES)


class EncodingError(ValueError):
    """A value that does not fit its column; the message says what was expected."""


def decode_value(duck_type: str, value: Any, schema: Mapping[str, Any] | None = None) -> Any:
    """The Python value of a Debezium-encoded ``value`` for a column of ``duck_type``.

    :raises EncodingError: when the value cannot be a value of that column.
    """
    if value is None:
        return None
    kind = duck_type.upper()
    if kind.endswith("[]"):
        if not isinstance(value, list):
            raise EncodingError(f"expected a JSON array for {duck_type}")
        return [decode_value(kind[:-2], item) for item in value]
    if kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMP"):
        return _timestamp(value, schema, aware=kind != "TIMESTAMP")
    if kind == "DATE":
        return _date(value)
    if kind in _INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise EncodingError(f"expected an integer for {duck_type}")
        return value
    if kind in _FLOATS:
        return float(_number(value, schema, None))
    if kind.startswith("DECIMAL"):
        match = _DECIMAL.match(kind)
        return _number(value, schema, int(match.group(2)) if match else None)
    if kind == "BOOLEAN":
        if not isinstance(value, bool):
            raise EncodingError("expected true or false")
        return value
    return _text_like(kind, value)


def _text_like(kind: str, value: Any) -> Any:
    if kind == "JSON":
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError as error:
                raise EncodingError(f"not a JSON document: {error}") from None
            return value
        return json.dumps(value)
    if kind == "BLOB":
        if not isinstance(value, str):
            raise EncodingError("expected base64 text for bytea")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as error:
            raise EncodingError(f"not base64: {error}") from None
    if not isinstance(value, str):
        raise EncodingError(f"expected a string for {kind}")
    if kind == "UUID":
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise EncodingError(f"not a UUID: {value[:40]!r}") from None
    return value


def _timestamp(value: Any, schema: Mapping[str, Any] | None, *, aware: bool) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise EncodingError(f"not an ISO 8601 timestamp: {value[:40]!r}") from None
        if aware and parsed.tzinfo is None:
            raise EncodingError("timestamptz without an offset")
        return parsed.astimezone(UTC) if aware else parsed.replace(tzinfo=None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodingError("expected an ISO 8601 string or integer epoch time")
    per_second = _PER_SECOND.get(str((schema or {}).get("name")), 1_000_000)
    seconds, fraction = divmod(value, per_second)
    moment = _UNIX_EPOCH + timedelta(
        seconds=seconds, microseconds=fraction * 1_000_000 // per_second
    )
    return moment if aware else moment.replace(tzinfo=None)


def _date(value: Any) -> date:
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise EncodingError(f"not an ISO 8601 date: {value[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodingError("expected integer days since 1970-01-01")
    return date(1970, 1, 1) + timedelta(days=value)


def _number(value: Any, schema: Mapping[str, Any] | None, scale: int | None) -> Decimal:
    """Decimal from a JSON number, a decimal string, base64 unscaled bytes (with the
    schema's or the column's scale) or a ``{scale, value}`` struct."""
    if isinstance(value, bool):
        raise EncodingError("expected a number")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        if not isinstance(value.get("scale"), int) or not isinstance(value.get("value"), str):
            raise EncodingError("expected a {scale, value} variable-scale decimal")
        return _unscaled(value["value"], value["scale"])
    if not isinstance(value, str):
        raise EncodingError("expected a number")
    try:
        return Decimal(value)
    except InvalidOperation:
        pass
    parameters = (schema or {}).get("parameters") or {}
    declared = parameters.get("scale", scale)
    if declared is None:
        raise EncodingError(f"not a number: {value[:40]!r}")
    return _unscaled(value, int(declared))


def _unscaled(encoded: str, scale: int) -> Decimal:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise EncodingError(f"not a number or base64 decimal: {encoded[:40]!r}") from None
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
