"""Folding text rows per key (what every change is staged as): property tests against a plain
model, the key-change rule, and the text form of typed values."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warehouse.rows import Layout, TextRows, text_value

LAYOUT = Layout.of("t", ["id", "value", "blob"], ["id"])
keys = st.sampled_from([b"a", b"b", b"c"])
changes = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), keys, st.text(max_size=3).map(str.encode), st.booleans()),
        st.tuples(st.just("delete"), keys, st.just(b""), st.just(False)),
        st.tuples(st.just("truncate"), st.just(b""), st.just(b""), st.just(False)),
    ),
    max_size=20,
)


@settings(deadline=None)
@given(changes)
def test_the_newest_change_per_key_wins(sequence: list[tuple[str, bytes, bytes, bool]]) -> None:
    rows = TextRows("t")
    model: dict[bytes, tuple[bytes | None, bool, bytes | None, bool]] = {}
    truncated = None
    for seq, (op, key, value, toast) in enumerate(sequence, start=1):
        version = (100, seq)
        if op == "upsert":
            unchanged = (2,) if toast else ()
            rows.upsert(LAYOUT, (key, value, None if toast else b"x"), version, unchanged)
            previous = model.get(key)
            blob, keep = (None, True) if toast else (b"x", False)
            if toast and previous is not None and not previous[1]:
                blob, keep = previous[2], previous[3]
            model[key] = (value, False, blob, keep)
        elif op == "delete":
            rows.delete(LAYOUT, (key, b"ignored", b"ignored"), version)
            model[key] = (None, True, None, False)
        else:
            rows.truncate(version)
            model.clear()
            truncated = version
    table = rows.to_arrow(["id", "value", "blob"]).to_pylist()
    got = {r["id"].encode(): r for r in table}
    assert set(got) == set(model) and rows.truncated_at == truncated
    for key, (value, deleted, blob, keep) in model.items():
        row = got[key]
        assert row["_deleted"] is deleted
        assert row["value"] == (value.decode() if value is not None else None)
        assert (row["_keep"] or []) == (["blob"] if keep else [])
        assert row["blob"] == (blob.decode() if blob is not None else None)


def test_an_update_that_changes_the_key_tombstones_the_old_key() -> None:
    rows = TextRows("t")
    rows.upsert(LAYOUT, (b"a", b"1", b"x"), (100, 1))
    rows.update(LAYOUT, (b"a", None, None), (b"b", b"2", b"x"), (100, 2))
    rows.update(LAYOUT, (b"b", b"2", b"x"), (b"b", b"3", b"x"), (100, 3))  # same key
    table = rows.to_arrow(["id", "value", "blob"]).to_pylist()
    got = {r["id"]: (r["value"], r["_deleted"], r["_seq"]) for r in table}
    assert got == {"a": (None, True, 2), "b": ("3", False, 3)}
    assert rows.changes == 3


def test_a_key_change_never_tombstones_a_newer_staged_row() -> None:
    rows = TextRows("t")
    rows.upsert(LAYOUT, (b"a", b"new", b"x"), (200, 1))
    rows.update(LAYOUT, (b"a", None, None), (b"b", b"old", b"x"), (100, 1))
    table = rows.to_arrow(["id", "value", "blob"]).to_pylist()
    assert {r["id"]: r["_deleted"] for r in table} == {"a": False, "b": False}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, None),
        (True, b"t"),
        (False, b"f"),
        (-7, b"-7"),
        (1.1, b"1.1"),
        (float("inf"), b"Infinity"),
        (float("-inf"), b"-Infinity"),
        (float("nan"), b"NaN"),
        (Decimal("5E+2"), b"500"),
        (Decimal("123.45"), b"123.45"),
        (datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), b"2024-05-01 12:00:00.123456+00:00"),
        (datetime(2018, 6, 20, 15, 13, 16), b"2018-06-20 15:13:16"),
        (date(2024, 5, 1), b"2024-05-01"),
        (b"\x00\xff", b"00ff"),
        (["x", None, "y z"], b'["x", null, "y z"]'),
        ([datetime(2024, 5, 1, tzinfo=UTC), b"\x01"], b'["2024-05-01T00:00:00+00:00", "01"]'),
        ({"a": [1]}, b'{"a": [1]}'),
        (uuid.UUID(int=1), b"00000000-0000-0000-0000-000000000001"),
        ("héllo", "héllo".encode()),
    ],
)
def test_values_render_in_the_text_form_the_follower_stages(value: object, text: bytes) -> None:
    assert text_value(value) == text
