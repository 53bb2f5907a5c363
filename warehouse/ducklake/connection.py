"""DuckDB connections to the lake: extensions from the wheels, attach, reader lockdown.

The ``ducklake`` and ``postgres`` extensions are loaded from the ``duckdb-extension-*`` wheels
(DuckDB's extension server is never contacted; signature checks stay on), and ``httpfs`` too
for a lake whose data is in S3 (``data_url``), reached with an S3 secret scoped to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
from pathlib import Path

import duckdb

from warehouse.config import DuckLakeConfig
from warehouse.ducklake.statements import ident, literal
from warehouse.errors import WarehouseError, WarehouseUnavailableError

_EXTENSIONS = ("postgres", "ducklake")


def extension_file(name: str) -> Path:
    """Path of the signed extension binary shipped in the ``duckdb-extension-<name>`` wheel."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise WarehouseError(
            f"the duckdb-extension-{name} wheel is not installed; "
            f"pip install duckdb-extension-{name}=={duckdb.__version__}",
            extension=name,
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise WarehouseError(
            f"{path} is missing: the duckdb-extension-{name} wheel does not "
            f"match duckdb {duckdb.__version__}",
            extension=name,
            path=str(path),
        )
    return path


def new_database(
    threads: int, memory_limit: str | None = None, *, s3: bool = False
) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB with the lake's extensions loaded (``httpfs`` with ``s3``)."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": threads,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    con = duckdb.connect(config=config)
    for name in (*_EXTENSIONS, "httpfs") if s3 else _EXTENSIONS:
        con.execute(f"INSTALL {literal(str(extension_file(name)))}")
        con.execute(f"LOAD {name}")
    con.execute("SET parquet_metadata_cache = true")  # lake files never change once written
    return con


def attach_lake(
    con: duckdb.DuckDBPyConnection,
    config: DuckLakeConfig,
    *,
    read_only: bool,
    lineage: bool = False,
) -> None:
    """Attach the lake under ``config.alias`` and make it the default catalog. ``lineage``:
    as the lineage writer (its own login, every insert a Parquet file, never inlined)."""
    config.check_complete()
    dsn = config.catalog_dsn
    if read_only and config.reader_catalog_dsn is not None:
        dsn = config.reader_catalog_dsn
    if lineage and config.lineage_catalog_dsn is not None:
        dsn = config.lineage_catalog_dsn
    assert dsn is not None
    if config.data_url is not None:
        _s3_secret(con, config)
    options = [f"DATA_PATH {literal(config.data_location)}"]
    if read_only:
        options.append("READ_ONLY")
    else:
        limit = 0 if lineage else int(config.data_inlining_row_limit)
        options.append(f"DATA_INLINING_ROW_LIMIT {limit}")
    target = literal("ducklake:postgres:" + dsn.get_secret_value())
    try:
        con.execute(f"ATTACH {target} AS {ident(config.alias)} ({', '.join(options)})")
    except duckdb.Error as error:
        raise WarehouseUnavailableError(
            f"cannot attach the DuckLake catalog: {error}",
            alias=config.alias,
            data_path=str(config.data_path),
        ) from error
    con.execute(f"USE {ident(config.alias)}")


def _s3_secret(con: duckdb.DuckDBPyConnection, config: DuckLakeConfig) -> None:
    """A temporary S3 secret of this connection, scoped to the lake's ``data_url``."""
    s3 = config.s3
    options = [
        "TYPE s3",
        f"REGION {literal(s3.region)}",
        f"URL_STYLE {literal(s3.url_style)}",
        f"USE_SSL {'true' if s3.use_ssl else 'false'}",
        f"SCOPE {literal(config.data_location)}",
    ]
    if s3.endpoint is not None:
        options.append(f"ENDPOINT {literal(s3.endpoint)}")
    if s3.key_id is not None and s3.secret is not None:
        options.append(f"KEY_ID {literal(s3.key_id.get_secret_value())}")
        options.append(f"SECRET {literal(s3.secret.get_secret_value())}")
    con.execute(f"CREATE OR REPLACE SECRET quarry_lake ({', '.join(options)})")


def lock_down(con: duckdb.DuckDBPyConnection, config: DuckLakeConfig) -> None:
    """Reader hardening: files only under the data path (or URL), no new attachments or
    extensions, a memory limit, and a locked configuration so that a query cannot undo any
    of it."""
    data_path = literal(config.data_location)
    con.execute(f"SET allowed_directories = [{data_path}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


# Errors that a reconnect (or the catalog coming back) can cure: the catalog server went away,
# a write conflicted, or DuckDB invalidated the instance after an internal error.
_TRANSIENT_KINDS = (
    duckdb.FatalException,
    duckdb.InternalException,
    duckdb.IOException,
    duckdb.ConnectionException,
    duckdb.TransactionException,
    duckdb.InterruptException,
)
# What DuckDB's Postgres scanner reports, under various error classes, when the catalog
# server is gone or restarting.
_TRANSIENT_TEXT = (
    "connect",
    "server closed the connection",
    "terminating connection",
    "shutting down",
    "unsuccessful query result",
    "database has been invalidated",
)


def is_transient(error: duckdb.Error) -> bool:
    """Whether the same statement may succeed after reconnecting (catalog unavailable, write
    conflict, an invalidated instance) rather than failing again (bad SQL, types, schema)."""
    if isinstance(error, _TRANSIENT_KINDS):
        return True
    text = str(error).lower()
    return any(marker in text for marker in _TRANSIENT_TEXT)


#: Connections a failed write left behind that were kept open (see :func:`discard_connection`).
DISCARDED: list[duckdb.DuckDBPyConnection] = []


def discard_connection(con: duckdb.DuckDBPyConnection, error: BaseException | None) -> None:
    """Roll back and close a writer connection that is being dropped, but keep it open for
    good when ``error`` (the failure that dropped it) says the catalog server went away.

    DuckDB 1.5.5 can abort the whole process inside ``close()`` of a connection whose DuckLake
    catalog lost its Postgres server in the middle of a commit: CI's run of 2026-12-04 and a
    fresh-clone run of 2026-12-07 died that way in
    ``tests/cdc/test_cdc_faults.py::test_postgres_restart_under_load`` (SIGABRT in
    ``_drop_writer``'s ``close()``, after the explicit rollback). Such a connection is not
    closed: it holds no catalog lock once its server is gone, and the next write attaches
    afresh. An extra reference that is never released keeps it from being freed, so not even
    interpreter shutdown closes it. Each costs one idle DuckDB instance, and only a catalog
    outage in the middle of a write makes one."""
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")
    if isinstance(error, duckdb.Error) and _catalog_gone(error):
        DISCARDED.append(con)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(con))
        return
    con.close()


def _catalog_gone(error: duckdb.Error) -> bool:
    """Whether ``error`` says the catalog server is gone (not a conflict or a bad statement)."""
    text = str(error).lower()
    if "conflict" in text:
        return False
    return isinstance(error, (duckdb.FatalException, duckdb.ConnectionException)) or any(
        marker in text for marker in _TRANSIENT_TEXT
    )
