"""DBOS's system database: a schema of its own (:data:`SYSTEM_SCHEMA`) in Quarry's
operational Postgres, reached with the same libpq connection string as the rest of Quarry
(a Unix socket for the embedded stack)."""

from __future__ import annotations

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
