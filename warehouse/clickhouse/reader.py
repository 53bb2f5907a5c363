"""Read-only queries on the ClickHouse backend: a pool of clients, every query checked,
pinned to one snapshot and run under limits the engine enforces.

A query arrives in ClickHouse's dialect (the service renders its checked DuckDB-dialect tree
with sqlglot). :mod:`warehouse.clickhouse.pinning` accepts one SELECT over the curation views
and pins every view to the snapshot; the query then runs with ``readonly = 1`` (no writes, no
table functions, no settings changes), ``max_execution_time``, ``max_result_rows`` and
``max_memory_usage`` in its own SETTINGS clause, so the limits hold for that query only.
Results come back with the Arrow types the DuckLake reader gives (:func:`conform`).
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.base import check_tag
from warehouse.clickhouse.apply import arrow_stage_type
from warehouse.clickhouse.client import (
    TIMEOUT_EXCEEDED,
    TOO_MANY_ROWS_OR_BYTES,
    connect,
    error_code,
    is_transient,
)
from warehouse.clickhouse.pinning import pin_query
from warehouse.clickhouse.schema import Databases, quote
from warehouse.config import ClickHouseConfig
from warehouse.errors import (
    QueryError,
    QueryTimeoutError,
    RowLimitError,
    WarehouseError,
    WarehouseUnavailableError,
)

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_INT64_MAX = 2**63 - 1
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def parse_bytes(text: str) -> int:
    """A size such as ``2GB`` or ``512MiB`` (DuckDB's spelling) in bytes."""
    match = _SIZE.match(text)
    unit = match[2].upper() if match else ""
    if match is None or unit not in _UNITS:
        raise WarehouseError(f"not a memory size: {text!r} (e.g. 2GB)", value=text)
    return int(float(match[1]) * _UNITS[unit])


class ClickHouseReader:
    """Read queries for one warehouse; thread-safe (a client per query at a time)."""

    def __init__(self, config: ClickHouseConfig) -> None:
        self._config = config
        self._names = Databases.of(config.database)
        reader = config.reader_dsn
        self._dsn = reader.get_secret_value() if reader is not None else config.server_dsn
        self._idle: queue.LifoQueue[tuple[Client, bool]] = queue.LifoQueue()
        self._memory = parse_bytes(config.reader_memory_limit)
        self._closed = threading.Event()
        self._view_names: frozenset[str] | None = None

    def _borrow(self) -> tuple[Client, bool]:
        """An idle client, or a new one; ``True`` when the query must set readonly itself."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            client = connect(self._dsn, session=True)
        try:
            mode = int(str(client.command("SELECT getSetting('readonly')")))
        except ClickHouseError as error:
            client.close()
            raise WarehouseUnavailableError(
                f"cannot open a ClickHouse reader: {error}", retryable=is_transient(error)
            ) from error
        if mode == 1:
            client.close()
            raise WarehouseError(
                "the ClickHouse reader account has readonly = 1, which forbids the per-query "
                "limits; give it a profile with readonly = 2 (see docs/warehouse.md)"
            )
        return client, mode == 0

    def _give_back(self, client: Client, own_readonly: bool) -> None:
        if self._closed.is_set() or self._idle.qsize() >= self._config.reader_pool:
            client.close()
        else:
            self._idle.put((client, own_readonly))

    def fetch(self, sql: str, parameters: dict[str, Any] | None = None) -> Sequence[Sequence[Any]]:
        """Rows of a small internal query (commits, metadata, view definitions)."""
        client, own_readonly = self._borrow()
        try:
            rows = client.query(sql, parameters=parameters).result_rows
        except ClickHouseError as error:
            client.close()
            raise WarehouseUnavailableError(
                f"warehouse read failed: {error}", retryable=is_transient(error)
            ) from error
        self._give_back(client, own_readonly)
        return rows

    def query_arrow(
        self,
        sql: str,
        *,
        snapshot: int,
        timeout_s: float | None,
        max_rows: int | None,
        tables: Mapping[str, pa.Table] | None = None,
        tag: str | None = None,
    ) -> pa.Table:
        """Run one read-only query at ``snapshot``; see the module docstring.

        :param timeout_s: seconds before the engine stops the query (default: the config's).
        :param max_rows: more rows than this raise :class:`RowLimitError` (default: the
            config's ``max_rows``; ``None`` there means no cap).
        :param tables: Arrow tables the query reads by name, as temporary tables of the
            query's session (unpinned).
        :param tag: the query's ``log_comment``, by which :meth:`kill` finds it.
        """
        if tag is not None:
            check_tag(tag)
        extra = self._check_names(tables or {}, sql)
        text = pin_query(sql, self._names, snapshot, extra)
        limit_s = timeout_s if timeout_s is not None else self._config.query_timeout_s
        cap = max_rows if max_rows is not None else self._config.max_rows
        client, own_readonly = self._borrow()
        try:
            with _temporary(client, tables or {}):
                settings = self._settings(limit_s, cap, own_readonly, tag)
                table = client.query_arrow(text + settings)
        except ClickHouseError as error:
            client.close()  # a failed query may leave session state behind (chDB)
            raise _query_failure(error, sql, limit_s, cap, snapshot) from error
        self._give_back(client, own_readonly)
        return conform(table, self._config.result_timezone)

    def _check_names(self, tables: Mapping[str, pa.Table], sql: str) -> frozenset[str]:
        for name, rows in tables.items():
            if not isinstance(name, str) or not _TABLE_NAME.match(name):
                raise QueryError(
                    f"cannot pass a table named {name!r}: names are lower-case identifiers",
                    sql=sql,
                )
            if name in self.view_names():
                raise QueryError(f"a table named {name!r} would shadow a view", sql=sql)
            if not isinstance(rows, pa.Table):
                raise QueryError(f"table {name!r} is not a pyarrow.Table", sql=sql)
        return frozenset(tables)

    def view_names(self) -> frozenset[str]:
        """The views of the warehouse's views database (read once)."""
        if self._view_names is None:
            rows = self.fetch(
                "SELECT name FROM system.tables WHERE database = {db:String}",
                {"db": self._names.views},
            )
            self._view_names = frozenset(str(r[0]) for r in rows)
        return self._view_names

    def kill(self, tag: str) -> None:
        """Stop the running queries tagged ``tag`` (``KILL QUERY``, not waiting); a query that
        has not started yet, or has ended, is not affected."""
        check_tag(tag)
        self.fetch(f"KILL QUERY WHERE Settings['log_comment'] = '{tag}' ASYNC")

    def _settings(
        self, limit_s: float, cap: int | None, own_readonly: bool, tag: str | None = None
    ) -> str:
        settings: list[tuple[str, str]] = [
            ("max_execution_time", repr(float(limit_s))),
            ("timeout_overflow_mode", "'throw'"),
            ("max_memory_usage", str(self._memory)),
            ("join_use_nulls", "1"),
            ("output_format_arrow_string_as_string", "1"),
            ("output_format_arrow_low_cardinality_as_dictionary", "0"),
        ]
        if cap is not None:
            settings += [("max_result_rows", str(int(cap))), ("result_overflow_mode", "'throw'")]
        if tag is not None:
            settings.append(("log_comment", f"'{tag}'"))
        if own_readonly:
            settings.append(("readonly", "1"))  # last: nothing can be set after it
        return "\nSETTINGS " + ", ".join(f"{name} = {value}" for name, value in settings)

    def close(self) -> None:
        self._closed.set()
        while True:
            try:
                client, _ = self._idle.get_nowait()
            except queue.Empty:
                return
            client.close()


@contextmanager
def _temporary(client: Client, tables: Mapping[str, pa.Table]) -> Iterator[None]:
    """``tables`` as temporary tables of ``client``'s session while the block runs."""
    made: list[str] = []
    try:
        for name, rows in tables.items():
            columns = ", ".join(f"{quote(f.name)} {arrow_stage_type(f.type)}" for f in rows.schema)
            client.command(f"CREATE TEMPORARY TABLE {quote(name)} ({columns}) ENGINE = Memory")
            made.append(name)
            client.insert_arrow(name, rows)
        yield
    finally:
        for name in made:
            client.command(f"DROP TEMPORARY TABLE IF EXISTS {quote(name)}")


def _query_failure(
    error: ClickHouseError, sql: str, limit_s: float, cap: int | None, snapshot: int
) -> WarehouseError:
    code = error_code(error)
    if code == TIMEOUT_EXCEEDED:
        return QueryTimeoutError(
            f"query ran past {limit_s} s and was stopped", timeout_s=limit_s, sql=sql
        )
    if code == TOO_MANY_ROWS_OR_BYTES:
        return RowLimitError(
            f"the query returned more than {cap} rows; add a LIMIT or a narrower filter",
            max_rows=cap,
            sql=sql,
        )
    if is_transient(error):
        return WarehouseUnavailableError(f"warehouse read failed: {error}", sql=sql)
    return QueryError(f"query failed: {error}", sql=sql, snapshot_id=snapshot, code=code)


def conform(table: pa.Table, timezone: str) -> pa.Table:
    """``table`` with the Arrow types the DuckLake reader returns: every field nullable,
    list items named ``l``, zoned timestamps in ``timezone``, dictionaries decoded, UUIDs as
    their text (DuckDB's), and ``UInt64`` (ClickHouse's type for ``count()``) as ``int64``
    when the values fit."""
    for index, field in enumerate(table.schema):
        if _is_uuid(field.type):
            table = table.set_column(index, field.name, uuid_text(table.column(index)))
    fields = [
        pa.field(f.name, _conform_type(f.type, timezone, table.column(f.name)), nullable=True)
        for f in table.schema
    ]
    schema = pa.schema(fields)
    return table if schema == table.schema else table.cast(schema)


def _conform_type(kind: pa.DataType, timezone: str, column: pa.ChunkedArray | None) -> pa.DataType:
    if pa.types.is_dictionary(kind):
        return _conform_type(kind.value_type, timezone, None)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(pa.field("l", _conform_type(kind.value_type, timezone, None)))
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, tz=timezone)
    if pa.types.is_uint64(kind) and column is not None and _fits_int64(column):
        return pa.int64()
    return kind


def _fits_int64(column: pa.ChunkedArray) -> bool:
    top = pc.max(column).as_py()
    return top is None or top <= _INT64_MAX


def _is_uuid(kind: pa.DataType) -> bool:
    return isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.uuid"


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# Where the 32 hex digits of a UUID go in its 36-character text (dashes at 8, 13, 18, 23).
_DIGITS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])


def uuid_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A UUID column (Arrow's ``arrow.uuid``: 16 bytes each) as lower-case text, the way
    DuckDB returns UUIDs; vectorized."""
    chunks = []
    for chunk in column.chunks:
        storage = chunk.storage if isinstance(chunk, pa.ExtensionArray) else chunk
        count, start = len(storage), storage.offset * 16
        raw = np.frombuffer(storage.buffers()[1], dtype=np.uint8)[start : start + count * 16]
        raw = raw.reshape(count, 16)
        text = np.full((count, 36), ord("-"), dtype=np.uint8)
        text[:, _DIGITS[0::2]] = _HEX[raw >> 4]
        text[:, _DIGITS[1::2]] = _HEX[raw & 15]
        digits = pa.py_buffer(text.tobytes())
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(36), count, [None, digits])
        strings = fixed.cast(pa.binary()).cast(pa.string())
        if storage.null_count:
            strings = pc.if_else(storage.is_null(), pa.scalar(None, pa.string()), strings)
        chunks.append(strings)
    return pa.chunked_array(chunks, pa.string())
