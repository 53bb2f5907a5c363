"""Text-form values: Postgres renders them on a pinned session, the decoder parses them back."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc.errors import DecodeError
from cdc.source import connect
from cdc.values import convert, parse_array

Conn = psycopg.Connection[tuple[Any, ...]]
_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def pinned(pg_dsn: str) -> Conn:
    return connect(pg_dsn)


def pg_text(conn: Conn, value: Any, pg_type: str) -> tuple[int, str | None]:
    """Postgres's own text form of ``value`` cast to ``pg_type``, and the type's OID."""
    query = psycopg.sql.SQL("SELECT %s::{0}::text, %s::regtype::oid").format(
        psycopg.sql.SQL(pg_type)
    )
    row = conn.execute(query, (value, pg_type)).fetchone()
    assert row is not None
    return int(row[1]), row[0]


text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12)


@_SETTINGS
@given(st.lists(st.none() | text, max_size=6))
def test_text_arrays_round_trip(pinned: Conn, items: list[str | None]) -> None:
    oid, rendered = pg_text(pinned, items, "text[]")
    assert rendered is not None and convert(oid, rendered) == items


@_SETTINGS
@given(
    st.lists(
        st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=2),
        min_size=1,
        max_size=3,
    )
)
def test_nested_bigint_arrays_round_trip(pinned: Conn, items: list[list[int | None]]) -> None:
    oid, rendered = pg_text(pinned, items, "bigint[]")
    assert rendered is not None and convert(oid, rendered) == items


@_SETTINGS
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_doubles_round_trip_exactly(pinned: Conn, value: float) -> None:
    oid, rendered = pg_text(pinned, value, "double precision")
    assert rendered is not None
    decoded = convert(oid, rendered)
    assert (math.isnan(value) and math.isnan(decoded)) or decoded == value


@_SETTINGS
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    )
)
def test_timestamptz_round_trip(pinned: Conn, value: datetime) -> None:
    oid, rendered = pg_text(pinned, value, "timestamptz")
    assert rendered is not None and convert(oid, rendered) == value


@_SETTINGS
@given(
    st.decimals(
        allow_nan=False,
        allow_infinity=False,
        places=4,
        min_value=Decimal(-(10**20)),
        max_value=Decimal(10**20),
    )
)
def test_numeric_round_trip(pinned: Conn, value: Decimal) -> None:
    oid, rendered = pg_text(pinned, value, "numeric")
    assert rendered is not None and convert(oid, rendered) == value


def test_scalars_of_the_schema(pinned: Conn) -> None:
    episode = uuid.uuid4()
    cases = [
        ("t", "boolean", True),
        (episode, "uuid", str(episode)),
        (-(2**31), "integer", -(2**31)),
        ('{"a": [1, 2]}', "jsonb", '{"a": [1, 2]}'),
        (b"\x00\xff", "bytea", b"\x00\xff"),
        ("infinity", "timestamptz", datetime.max.replace(tzinfo=UTC)),
        ("2024-02-29", "date", datetime(2024, 2, 29).date()),
        ([True, None], "boolean[]", [True, None]),
        (["{}", "[1]"], "jsonb[]", ["{}", "[1]"]),
    ]
    for value, pg_type, expected in cases:
        oid, rendered = pg_text(pinned, value, pg_type)
        assert rendered is not None and convert(oid, rendered) == expected, pg_type


def test_session_pins_the_time_zone(pg_conn: Conn, pg_dsn: str) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    pg_conn.execute(
        psycopg.sql.SQL("ALTER DATABASE {} SET TimeZone = 'Asia/Tokyo'").format(
            psycopg.sql.Identifier(str(dbname))
        )
    )
    moment = datetime(2024, 1, 1, 12, tzinfo=UTC) + timedelta(microseconds=7)
    with connect(pg_dsn) as conn:
        _, rendered = pg_text(conn, moment, "timestamptz")
    assert rendered == "2024-01-01 12:00:00.000007+00"


def test_array_with_bounds_and_bad_literals() -> None:
    assert parse_array("[0:1]={1,2}", int) == [1, 2]
    for bad in ("{1,2", "{1,2}x", "1,2}", '{"a}'):
        with pytest.raises(ValueError):
            parse_array(bad, int)
    with pytest.raises(DecodeError):
        convert(23, "twelve")
