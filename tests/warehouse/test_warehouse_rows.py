"""Folding text rows per key (the follower's staging): property tests against a plain model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from warehouse.rows import Layout, TextRows

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
