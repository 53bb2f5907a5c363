"""Debezium's value encodings, decoded for warehouse column types (no database needed)."""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from cdc.debezium import Source, next_position, parse_events
from cdc.debezium_types import UNAVAILABLE, EncodingError, decode_value
from cdc.errors import EventError, SourceConflictError
from warehouse.changes import Position


def unscaled(value: int) -> str:
    return base64.b64encode(
        value.to_bytes(8, "big", signed=True).lstrip(b"\x00") or b"\x00"
    ).decode()


@pytest.mark.parametrize(
    ("duck_type", "value", "schema", "expected"),
    [
        (
            "TIMESTAMP WITH TIME ZONE",
            "2024-05-01T12:00:00.5Z",
            None,
            datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC),
        ),
        (
            "TIMESTAMP",
            1529507596945104,
            {"name": "io.debezium.time.MicroTimestamp"},
            datetime(2018, 6, 20, 15, 13, 16, 945104),
        ),
        (
            "TIMESTAMP",
            1529507596945,
            {"name": "io.debezium.time.Timestamp"},
            datetime(2018, 6, 20, 15, 13, 16, 945000),
        ),
        ("DATE", 19844, {"name": "io.debezium.time.Date"}, date(2024, 5, 1)),
        ("DECIMAL(10,2)", unscaled(12345), {"parameters": {"scale": "2"}}, Decimal("123.45")),
        ("DECIMAL(10,2)", "123.45", None, Decimal("123.45")),
        ("DOUBLE", {"scale": 3, "value": unscaled(-1500)}, None, -1.5),
        (
            "UUID",
            "6F1C7D2E-8A41-4B57-9A35-2B0C1E7D9F10",
            None,
            "6f1c7d2e-8a41-4b57-9a35-2b0c1e7d9f10",
        ),
        ("JSON", {"a": [1]}, None, '{"a": [1]}'),
        ("BLOB", base64.b64encode(b"\x00\xff").decode(), None, b"\x00\xff"),
        ("BIGINT[]", [1, None, 3], None, [1, None, 3]),
        ("BOOLEAN", None, None, None),
    ],
)
def test_documented_encodings_decode(
    duck_type: str, value: Any, schema: dict[str, Any] | None, expected: Any
) -> None:
    assert decode_value(duck_type, value, schema) == expected


@pytest.mark.parametrize(
    ("duck_type", "value"),
    [
        ("INTEGER", "7"),
        ("INTEGER", True),
        ("BOOLEAN", "t"),
        ("UUID", "nope"),
        ("JSON", "{nope"),
        ("TIMESTAMP WITH TIME ZONE", "2024-05-01 12:00"),
        ("BLOB", "***"),
    ],
)
def test_values_that_do_not_fit_are_refused(duck_type: str, value: Any) -> None:
    with pytest.raises(EncodingError):
        decode_value(duck_type, value)


def test_position_never_goes_back_and_one_source_per_warehouse() -> None:
    def change(lsn: int) -> Source:
        return Source("robots", lsn, ts_ms=1, tx_id=7)

    first = next_position(None, [change(300), change(100)], "pg")
    assert (first.lsn, first.snapshot_lsn, first.slot) == (300, 100, "debezium:pg")
    assert next_position(first, [change(200)], "pg") == first
    assert next_position(first, [change(400)], "pg").lsn == 400
    follower = Position(lsn=10, snapshot_lsn=1, slot="quarry_cdc")
    with pytest.raises(SourceConflictError):
        next_position(follower, [change(400)], "pg")


COLUMNS = {"robots": {"id": "VARCHAR", "model": "VARCHAR"}}
KEYS = {"robots": ("id",)}


def _change(op: str, **parts: Any) -> dict[str, Any]:
    source = {"table": "robots", "schema": "public", "lsn": 100, "ts_ms": 1, "name": "pg"}
    return {"op": op, "source": source, **parts}


@pytest.mark.parametrize(
    ("op", "parts", "field"),
    [
        ("d", {"before": {"id": UNAVAILABLE}}, "before.id"),
        ("u", {"before": {"id": UNAVAILABLE}, "after": {"id": "r2", "model": "m"}}, "before.id"),
        ("u", {"after": {"id": UNAVAILABLE, "model": "m"}}, "after.id"),
    ],
)
def test_a_key_that_is_the_unavailable_placeholder_is_refused(
    op: str, parts: dict[str, Any], field: str
) -> None:
    """A key column holding Debezium's unchanged-TOAST placeholder names no row: the event is
    refused with its index and field (a 4xx), not staged under the placeholder."""
    with pytest.raises(EventError) as raised:
        parse_events(
            [_change("c", after={"id": "r1", "model": "m"}), _change(op, **parts)], COLUMNS, KEYS
        )
    assert raised.value.context["index"] == 1 and raised.value.context["field"] == field
