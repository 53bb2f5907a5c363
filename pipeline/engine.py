"""DBOS's system database: a schema of its own (:data:`SYSTEM_SCHEMA`) in Quarry's
operational Postgres, reached with the same libpq connection string as the rest of Quarry
(a Unix socket for the embedded stack)."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

#: The Postgres schema that holds DBOS's tables (workflow status, step outputs, queues).
SYSTEM_SCHEMA = "quarry_pipeline"


def system_url(dsn: str) -> str:
    """The SQLAlchemy URL (psycopg 3) of the libpq connection string ``dsn``; a socket
    folder as host travels in the query, as libpq takes it."""
    import sqlalchemy as sa  # here: reading progress (the service) needs neither it nor DBOS

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    host = params.pop("host", None)
    port = params.pop("port", None)
    url = sa.URL.create(
        "postgresql+psycopg",
        username=params.pop("user", None),
        password=params.pop("password", None),
        host=None if host is None or host.startswith("/") else host,
        port=int(port) if port else None,
        database=params.pop("dbname", None),
        query={**params, **({"host": host} if host and host.startswith("/") else {})},
    )
    return url.render_as_string(hide_password=False)


def migrate_system(dsn: str) -> None:
    """Create or migrate DBOS's tables in :data:`SYSTEM_SCHEMA` (idempotent)."""
    from dbos import DBOS

    DBOS.migrate(system_url(dsn), schema=SYSTEM_SCHEMA)


def engine_options(dsn: str, synchronous: bool) -> dict[str, Any]:
    """SQLAlchemy engine options of a worker's connections to DBOS's tables (DBOS's
    ``db_engine_kwargs``).

    No ping before each pool checkout (DBOS's default pings: a round trip more per
    transaction, two transactions per step): a connection the database closed fails its
    statement, which DBOS retries on a fresh one after a second.

    ``synchronous`` False: the worker's own records (dequeues, step outputs, workflow
    states) commit without waiting for the WAL flush (``synchronous_commit = off``). A
    worker killed at any point loses none of them: they are in the database's memory, and
    WAL is written in order. A crash of the database server itself may lose the last
    fraction of a second of them, never a record older than a later synchronous commit
    (its flush carries the earlier WAL), and every episode's registration is such a commit,
    on Quarry's own connection. So a lost record means a step after the last registration
    runs again with the outputs recorded before it, and registering the same container
    twice changes nothing (``episodes.versions.register_version``). Enqueueing a run
    (:mod:`pipeline.runs`) always commits synchronously.
    """
    options = conninfo_to_dict(dsn).get("options")
    connect_args: dict[str, Any] = {"application_name": "quarry-worker"}
    if not synchronous:
        extra = "-c synchronous_commit=off"
        connect_args["options"] = f"{options} {extra}" if options else extra
    return {"pool_pre_ping": False, "connect_args": connect_args}
