"""Decoder of the ``pgoutput`` logical replication protocol, version 1.

Reference: PostgreSQL's "Logical Replication Message Formats". Integers are big-endian;
strings are NUL-terminated UTF-8; LSNs are integer byte positions in the WAL; timestamps are
integer microseconds since 2000-01-01 UTC. Message and tuple kinds decode into enums.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import TypeVar

from cdc.errors import DecodeError

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_E = TypeVar("_E", bound=Enum)
_UNIX_TO_PG_US = 946_684_800_000_000


class MessageKind(Enum):
    """First byte of a pgoutput message."""

    BEGIN = b"B"
    COMMIT = b"C"
    ORIGIN = b"O"
    RELATION = b"R"
    TYPE = b"Y"
    INSERT = b"I"
    UPDATE = b"U"
    DELETE = b"D"
    TRUNCATE = b"T"
    MESSAGE = b"M"


class TupleKind(Enum):
    """Kind of one column value inside TupleData."""

    NULL = b"n"
    UNCHANGED_TOAST = b"u"
    TEXT = b"t"
    BINARY = b"b"


class ReplicaIdentity(Enum):
    DEFAULT = b"d"
    NOTHING = b"n"
    FULL = b"f"
    INDEX = b"i"


@dataclass(frozen=True, slots=True)
class BinaryValue:
    """A column value in binary format (only sent when the ``binary`` option is on)."""

    data: bytes


#: One column of a TupleData: the value's text as ``bytes``; ``None`` for NULL;
#: ``TupleKind.UNCHANGED_TOAST`` for an unchanged TOASTed value that was not sent; a
#: :class:`BinaryValue` for a binary-format value.
TupleValue = bytes | BinaryValue | TupleKind | None
TupleData = tuple[TupleValue, ...]
UNCHANGED = TupleKind.UNCHANGED_TOAST
# Tuple kinds as the integer bytes the decoder's hot loop compares (from the enum, not magic).
_TEXT, _NULL_KIND, _UNCHANGED_KIND, _BINARY = (
    kind.value[0]
    for kind in (TupleKind.TEXT, TupleKind.NULL, TupleKind.UNCHANGED_TOAST, TupleKind.BINARY)
)
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int  # LSN of the transaction's commit record
    commit_time_us: int  # microseconds since 2000-01-01 UTC
    xid: int

    @property
    def commit_time(self) -> datetime:
        return pg_time(self.commit_time_us)


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int  # end of the commit record: where the next transaction can start
    commit_time_us: int


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    is_key: bool
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: ReplicaIdentity
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class TypeInfo:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relation_oid: int
    new: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    relation_oid: int
    old: TupleData | None  # the old key ('K') or whole old row ('O'), when sent
    old_is_key: bool
    new: TupleData


@dataclass(frozen=True, slots=True)
class Delete:
    relation_oid: int
    old: TupleData
    old_is_key: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeInfo
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
)


def pg_time(microseconds: int) -> datetime:
    """A Postgres timestamp (integer microseconds since 2000-01-01 UTC) as an aware datetime."""
    return PG_EPOCH + timedelta(microseconds=microseconds)


def pg_time_to_unix_ms(microseconds: int) -> int:
    """A Postgres timestamp as integer milliseconds since the Unix epoch."""
    return (microseconds + _UNIX_TO_PG_US) // 1000


class _Cursor:
    """Bounds-checked reads from one message."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if size < 0 or end > len(self.data):
            raise DecodeError(
                f"pgoutput message truncated: needs {size} bytes at offset "
                f"{self.offset}, has {len(self.data) - self.offset}",
                offset=self.offset,
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def int8(self) -> int:
        return self.unpack(">b")[0]

    def int16(self) -> int:
        return self.unpack(">h")[0]

    def int32(self) -> int:
        return self.unpack(">i")[0]

    def uint32(self) -> int:
        return self.unpack(">I")[0]

    def int64(self) -> int:
        return self.unpack(">q")[0]

    def uint64(self) -> int:
        return self.unpack(">Q")[0]

    def string(self) -> str:
        end = self.data.find(b"\x00", self.offset)
        if end < 0:
            raise DecodeError("pgoutput string without its NUL terminator", offset=self.offset)
        raw = self.data[self.offset : end]
        self.offset = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError as error:
            raise DecodeError(f"pgoutput string is not UTF-8: {error}") from error

    def byte(self) -> bytes:
        return self.take(1)

    def done(self) -> None:
        if self.offset != len(self.data):
            raise DecodeError(
                f"{len(self.data) - self.offset} unexpected trailing bytes in a pgoutput message",
                offset=self.offset,
            )


def decode_message(data: bytes) -> Message:
    """Decode one pgoutput (protocol version 1) message; :class:`DecodeError` if malformed."""
    cur = _Cursor(bytes(data))
    first = cur.byte()
    try:
        kind = MessageKind(first)
    except ValueError:
        raise DecodeError(f"unknown pgoutput message kind {first!r}", kind=first) from None
    message = _DECODERS[kind](cur)
    cur.done()
    return message


def _begin(cur: _Cursor) -> Begin:
    return Begin(final_lsn=cur.uint64(), commit_time_us=cur.int64(), xid=cur.uint32())


def _commit(cur: _Cursor) -> Commit:
    return Commit(
        flags=cur.int8(), commit_lsn=cur.uint64(), end_lsn=cur.uint64(), commit_time_us=cur.int64()
    )


def _origin(cur: _Cursor) -> Origin:
    return Origin(lsn=cur.uint64(), name=cur.string())


def _relation(cur: _Cursor) -> Relation:
    oid, namespace, name = cur.uint32(), cur.string(), cur.string()
    identity = _enum(ReplicaIdentity, cur.byte(), "replica identity")
    columns = []
    for _ in range(cur.int16()):
        flags = cur.int8()
        columns.append(
            RelationColumn(
                is_key=bool(flags & 1),
                name=cur.string(),
                type_oid=cur.uint32(),
                type_modifier=cur.int32(),
            )
        )
    return Relation(oid, namespace, name, identity, tuple(columns))


def _type(cur: _Cursor) -> TypeInfo:
    return TypeInfo(oid=cur.uint32(), namespace=cur.string(), name=cur.string())


def _tuple(cur: _Cursor) -> TupleData:
    # The hot path of decoding (every column of every row): one tight loop over the buffer,
    # values left as bytes (the warehouse casts text in bulk).
    data, pos = cur.data, cur.offset
    end = len(data)
    try:
        (count,) = _INT16.unpack_from(data, pos)
        pos += 2
        values: list[TupleValue] = []
        append = values.append
        for _ in range(count):
            kind = data[pos]
            if kind == _TEXT:
                (size,) = _INT32.unpack_from(data, pos + 1)
                start = pos + 5
                pos = start + size
                if size < 0 or pos > end:
                    raise DecodeError("pgoutput tuple value runs past the message", offset=start)
                append(data[start:pos])
            elif kind == _NULL_KIND:
                append(None)
                pos += 1
            elif kind == _UNCHANGED_KIND:
                append(UNCHANGED)
                pos += 1
            elif kind == _BINARY:
                (size,) = _INT32.unpack_from(data, pos + 1)
                start = pos + 5
                pos = start + size
                if size < 0 or pos > end:
                    raise DecodeError("pgoutput tuple value runs past the message", offset=start)
                append(BinaryValue(data[start:pos]))
            else:
                raise DecodeError(f"unknown tuple column kind {bytes([kind])!r}", offset=pos)
    except (IndexError, struct.error):
        raise DecodeError("pgoutput tuple truncated", offset=pos) from None
    cur.offset = pos
    return tuple(values)


def _expect(cur: _Cursor, *allowed: bytes) -> bytes:
    marker = cur.byte()
    if marker not in allowed:
        raise DecodeError(
            f"expected one of {allowed!r} in a pgoutput message, got {marker!r}",
            offset=cur.offset - 1,
        )
    return marker


def _insert(cur: _Cursor) -> Insert:
    oid = cur.uint32()
    _expect(cur, b"N")
    return Insert(oid, _tuple(cur))


def _update(cur: _Cursor) -> Update:
    oid = cur.uint32()
    marker = _expect(cur, b"K", b"O", b"N")
    old: TupleData | None = None
    if marker != b"N":
        old = _tuple(cur)
        _expect(cur, b"N")
    return Update(oid, old, marker == b"K", _tuple(cur))


def _delete(cur: _Cursor) -> Delete:
    oid = cur.uint32()
    marker = _expect(cur, b"K", b"O")
    return Delete(oid, _tuple(cur), marker == b"K")


def _truncate(cur: _Cursor) -> Truncate:
    count, options = cur.int32(), cur.int8()
    oids = tuple(cur.uint32() for _ in range(count))
    return Truncate(oids, cascade=bool(options & 1), restart_identity=bool(options & 2))


def _message(cur: _Cursor) -> LogicalMessage:
    transactional, lsn, prefix = bool(cur.int8() & 1), cur.uint64(), cur.string()
    return LogicalMessage(transactional, lsn, prefix, cur.take(cur.int32()))


def _enum(cls: type[_E], raw: bytes, what: str) -> _E:
    try:
        return cls(raw)
    except ValueError:
        raise DecodeError(f"unknown {what} {raw!r} in a pgoutput message") from None


_DECODERS: dict[MessageKind, Callable[[_Cursor], Message]] = {
    MessageKind.BEGIN: _begin,
    MessageKind.COMMIT: _commit,
    MessageKind.ORIGIN: _origin,
    MessageKind.RELATION: _relation,
    MessageKind.TYPE: _type,
    MessageKind.INSERT: _insert,
    MessageKind.UPDATE: _update,
    MessageKind.DELETE: _delete,
    MessageKind.TRUNCATE: _truncate,
    MessageKind.MESSAGE: _message,
}
