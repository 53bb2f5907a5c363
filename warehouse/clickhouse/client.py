"""ClickHouse connections through clickhouse-connect, and what their errors mean to Quarry.

``dsn`` is anything ``clickhouse_connect.get_client(dsn=...)`` takes: an HTTP(S) URL for a
server, or ``chdb:///folder`` for chDB (the ClickHouse engine in-process; one process per data
folder). Nothing connects until a client is asked for.
"""

from __future__ import annotations

import uuid

from clickhouse_connect import get_client
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, DatabaseError, OperationalError

from warehouse.errors import WarehouseError, WarehouseUnavailableError

# Server error codes that a retry (or the server coming back) can cure.
TRANSIENT_CODES = frozenset(
    {
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        203,  # NO_FREE_CONNECTION
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        242,  # TABLE_IS_READ_ONLY (a replica lost its keeper session)
        319,  # UNKNOWN_STATUS_OF_INSERT
        999,  # KEEPER_EXCEPTION
    }
)
TIMEOUT_EXCEEDED = 159
TOO_MANY_ROWS_OR_BYTES = 396
QUERY_WAS_CANCELLED = 394
CHDB_SCHEME = "chdb:"


def connect(dsn: str, *, session: bool = False) -> Client:
    """A new client for ``dsn``; an unreachable server is a retryable error. With
    ``session``, an HTTP client has a session of its own (temporary tables live in one; a
    chDB client always has one); without, one HTTP client serves concurrent queries."""
    try:
        if dsn.startswith(CHDB_SCHEME):
            return get_client(dsn=dsn)
        if session:
            return get_client(dsn=dsn, session_id=f"quarry-{uuid.uuid4().hex}")
        return get_client(dsn=dsn, autogenerate_session_id=False)
    except ClickHouseError as error:
        raise WarehouseUnavailableError(
            f"cannot connect to ClickHouse: {error}", retryable=is_transient(error)
        ) from error


def error_code(error: BaseException) -> int | None:
    """The server's numeric error code, when the error carries one."""
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def is_transient(error: BaseException) -> bool:
    """Whether the same call may succeed later: the server unreachable or overloaded, as
    opposed to bad SQL, types or schema."""
    code = error_code(error)
    if code is not None:
        return code in TRANSIENT_CODES
    return isinstance(error, OperationalError) or not isinstance(error, DatabaseError)


def failure(what: str, error: ClickHouseError, **context: object) -> WarehouseError:
    """``error`` as a warehouse error: retryable ones as :class:`WarehouseUnavailableError`."""
    retryable = is_transient(error)
    kind = WarehouseUnavailableError if retryable else WarehouseError
    return kind(f"{what} failed: {error}", retryable=retryable, code=error_code(error), **context)
