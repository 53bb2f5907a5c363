"""The pgoutput decoder: encode-then-decode round trips (hypothesis), malformed input, and
the messages a real Postgres sends."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.errors import DecodeError
from cdc.pgoutput import (
    Begin,
    BinaryValue,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    Truncate,
    TupleData,
    TupleKind,
    TypeInfo,
    Update,
    decode_message,
)

# -- a test-side encoder, written from the protocol documentation -----------------------------


def _s(text: str) -> bytes:
    return text.encode() + b"\x00"


def _tuple(data: TupleData) -> bytes:
    out = struct.pack(">h", len(data))
    for value in data:
        if value is None:
            out += TupleKind.NULL.value
        elif value is TupleKind.UNCHANGED_TOAST:
            out += TupleKind.UNCHANGED_TOAST.value
        elif isinstance(value, BinaryValue):
            out += TupleKind.BINARY.value + struct.pack(">i", len(value.data)) + value.data
        else:
            assert isinstance(value, bytes)
            out += TupleKind.TEXT.value + struct.pack(">i", len(value)) + value
    return out


def encode(message: Message) -> bytes:
    if isinstance(message, Begin):
        return b"B" + struct.pack(">QqI", message.final_lsn, message.commit_time_us, message.xid)
    if isinstance(message, Commit):
        return b"C" + struct.pack(
            ">bQQq", message.flags, message.commit_lsn, message.end_lsn, message.commit_time_us
        )
    if isinstance(message, Origin):
        return b"O" + struct.pack(">Q", message.lsn) + _s(message.name)
    if isinstance(message, Relation):
        out = b"R" + struct.pack(">I", message.oid) + _s(message.namespace) + _s(message.name)
        out += message.replica_identity.value + struct.pack(">h", len(message.columns))
        for c in message.columns:
            out += struct.pack(">b", int(c.is_key)) + _s(c.name)
            out += struct.pack(">Ii", c.type_oid, c.type_modifier)
        return out
    if isinstance(message, TypeInfo):
        return b"Y" + struct.pack(">I", message.oid) + _s(message.namespace) + _s(message.name)
    if isinstance(message, Insert):
        return b"I" + struct.pack(">I", message.relation_oid) + b"N" + _tuple(message.new)
    if isinstance(message, Update):
        out = b"U" + struct.pack(">I", message.relation_oid)
        if message.old is not None:
            out += (b"K" if message.old_is_key else b"O") + _tuple(message.old)
        return out + b"N" + _tuple(message.new)
    if isinstance(message, Delete):
        marker = b"K" if message.old_is_key else b"O"
        return b"D" + struct.pack(">I", message.relation_oid) + marker + _tuple(message.old)
    if isinstance(message, Truncate):
        options = int(message.cascade) | (int(message.restart_identity) << 1)
        out = b"T" + struct.pack(">ib", len(message.relation_oids), options)
        return out + b"".join(struct.pack(">I", oid) for oid in message.relation_oids)
    assert isinstance(message, LogicalMessage)
    return (
        b"M"
        + struct.pack(">bQ", int(message.transactional), message.lsn)
        + _s(message.prefix)
        + struct.pack(">i", len(message.content))
        + message.content
    )


# -- strategies ---------------------------------------------------------------------------------

lsns = st.integers(0, 2**64 - 1)
oids = st.integers(0, 2**32 - 1)
times = st.integers(-(2**63), 2**63 - 1)
names = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=20
)
values = st.one_of(
    st.none(),
    st.just(TupleKind.UNCHANGED_TOAST),
    st.binary(max_size=64),
    st.builds(BinaryValue, st.binary(max_size=64)),
)
tuples = st.lists(values, max_size=8).map(tuple)
columns = st.builds(RelationColumn, st.booleans(), names, oids, st.integers(-(2**31), 2**31 - 1))
messages = st.one_of(
    st.builds(Begin, lsns, times, oids),
    st.builds(Commit, st.integers(-128, 127), lsns, lsns, times),
    st.builds(Origin, lsns, names),
    st.builds(
        Relation,
        oids,
        names,
        names,
        st.sampled_from(list(ReplicaIdentity)),
        st.lists(columns, max_size=6).map(tuple),
    ),
    st.builds(TypeInfo, oids, names, names),
    st.builds(Insert, oids, tuples),
    st.builds(Update, oids, st.none() | tuples, st.booleans(), tuples).map(
        lambda u: u if u.old is not None else Update(u.relation_oid, None, False, u.new)
    ),
    st.builds(Delete, oids, tuples, st.booleans()),
    st.builds(Truncate, st.lists(oids, max_size=5).map(tuple), st.booleans(), st.booleans()),
    st.builds(LogicalMessage, st.booleans(), lsns, names, st.binary(max_size=32)),
)


@given(messages)
def test_decode_inverts_encode(message: Message) -> None:
    assert decode_message(encode(message)) == message


@given(messages, st.data())
def test_truncated_message_is_a_decode_error(message: Message, data: st.DataObject) -> None:
    raw = encode(message)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DecodeError):
        decode_message(raw[:cut])


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(raw: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_message(raw)


def test_trailing_bytes_are_refused() -> None:
    raw = encode(Begin(1, 2, 3)) + b"x"
    with pytest.raises(DecodeError, match="trailing"):
        decode_message(raw)
