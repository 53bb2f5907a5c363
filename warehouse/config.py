"""Settings of the warehouse: one pydantic section per backend, a union told apart by
``backend``, built by the entry point and passed in.

The ``quarry`` settings and ``python -m cdc`` read it from the same environment variables,
``QUARRY_WAREHOUSE__<FIELD>`` (``QUARRY_WAREHOUSE__BACKEND=clickhouse``,
``QUARRY_WAREHOUSE__DSN=...``); without ``backend`` a section is DuckLake's. Connection
strings may be left unset in the settings (the embedded stack fills DuckLake's in); a backend
refuses to open with one missing (:meth:`DuckLakeConfig.check_complete`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, SecretStr, Tag

from warehouse.errors import WarehouseError

#: How the settings name a warehouse field in the environment (``QUARRY_WAREHOUSE__DSN``).
ENV_PREFIX = "QUARRY_WAREHOUSE__"


class _Section(BaseModel):
    """What both backends take: how their readers are limited and how long snapshots stay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_timeout_s: float = Field(default=30.0, gt=0, description="seconds, per read query")
    max_rows: int | None = Field(default=None, gt=0, description="row cap of a read query")
    reader_memory_limit: str = Field(
        default="2GB", description="memory limit of a read query (DuckDB size, e.g. 2GB)"
    )
    snapshot_retain_s: float = Field(
        default=3600.0,
        ge=0,
        description="maintenance never expires a snapshot younger than this (seconds)",
    )

    def _require(self, **fields: object) -> None:
        missing = [name for name, value in fields.items() if value is None]
        if missing:
            names = ", ".join(f"{name} ({ENV_PREFIX}{name.upper()})" for name in missing)
            raise WarehouseError(
                f"the {getattr(self, 'backend', '?')} warehouse needs {names}", missing=missing
            )


class S3Config(BaseModel):
    """Where and how DuckDB's ``httpfs`` reaches the bucket of ``data_url`` (an S3 secret
    scoped to it); unset parts fall back to AWS's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$",
        description="host[:port] of an S3-compatible server (MinIO); unset: AWS",
    )
    region: str = Field(
        default="us-east-1", pattern=r"^[a-z0-9-]{1,32}$", description="the S3 region of the bucket"
    )
    key_id: SecretStr | None = Field(default=None, description="access key ID (a secret)")
    secret: SecretStr | None = Field(default=None, description="secret access key (a secret)")
    use_ssl: bool = Field(default=True, description="https to the endpoint")
    url_style: Literal["vhost", "path"] = Field(
        default="vhost", description="'path' for MinIO and most S3-compatible servers"
    )


class DuckLakeConfig(_Section):
    """The DuckLake backend (embedded default): catalog in Postgres, data as Parquet.

    ``catalog_dsn`` is a libpq connection string for the DuckLake catalog database, e.g.
    ``host=/state/pg-socket user=postgres dbname=quarry_catalog``. Readers connect with
    ``reader_catalog_dsn`` when it is set: a SELECT-only, non-superuser role, so that a query
    cannot reach the catalog server's files through the Postgres extension.
    """

    backend: Literal["ducklake"] = Field(
        default="ducklake", description="which backend this section configures"
    )
    catalog_dsn: SecretStr | None = Field(
        default=None, description="the lake's catalog database; unset: the embedded stack's"
    )
    data_path: Path | None = Field(
        default=None, description="folder of the Parquet data files; unset: the state folder's"
    )
    data_url: str | None = Field(
        default=None,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$",
        description="the Parquet data in S3 instead (s3://bucket/prefix), through DuckDB's "
        "httpfs; readers may read under it and nowhere else",
    )
    s3: S3Config = S3Config()
    reader_catalog_dsn: SecretStr | None = Field(
        default=None,
        description="the catalog login of readers (SELECT only); unset: the embedded "
        "stack's quarry_reader, else catalog_dsn",
    )
    lineage_catalog_dsn: SecretStr | None = Field(
        default=None,
        description="the catalog login of the lineage writer (writes the catalog's rows, "
        "no superuser); unset: the embedded stack's quarry_lineage, else catalog_dsn",
    )
    alias: str = Field(
        default="wh",
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="name the lake is attached under inside DuckDB",
    )
    reader_threads: int = Field(default=2, ge=1, description="DuckDB threads of a reader")
    writer_threads: int = Field(
        default=1,
        ge=1,
        description="DuckDB threads of the writer; CDC batches are small, and one thread "
        "applies them with the least CPU on a busy machine",
    )
    data_inlining_row_limit: int = Field(
        default=1000,
        ge=0,
        description="inserts of at most this many rows stay in the catalog until maintenance "
        "flushes them to Parquet; keeps small CDC commits cheap",
    )
    rewrite_delete_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="maintenance rewrites a data file once this fraction of its rows is "
        "deleted (CDC updates delete rows everywhere; DuckLake only merges files without "
        "deletes), so the file count stays bounded",
    )

    def check_complete(self) -> None:
        """Refuse a section without its catalog or data folder (``WarehouseError``)."""
        self._require(catalog_dsn=self.catalog_dsn, data_path=self.data_path or self.data_url)

    @property
    def data_location(self) -> str:
        """Where the data files are, ending in ``/``: ``data_url`` or ``data_path``."""
        self.check_complete()
        location = self.data_url or str(self.data_path)
        return location if location.endswith("/") else location + "/"

    @property
    def lake_data_path(self) -> Path:
        """``data_path``, which must be set (see :meth:`check_complete`)."""
        self.check_complete()
        assert self.data_path is not None
        return self.data_path


class ClickHouseConfig(_Section):
    """The ClickHouse backend (scale-out): where the server is and how readers are limited.

    ``dsn`` is what ``clickhouse_connect.get_client(dsn=...)`` takes: ``http(s)://user:pw@host:
    8123`` for a server, or ``chdb:///path`` for chDB, ClickHouse in-process (one process per
    data folder: tests and single-process tools only). ``reader_dsn`` is the account the
    readers use when set; see docs/warehouse.md for its settings profile and grants. Both are
    secrets: set them through the environment, never a flag.
    The warehouse lives in three databases: ``<database>`` (the curation views),
    ``<database>_mirror`` (mirrored tables) and ``<database>_meta`` (commits, metadata).
    """

    backend: Literal["clickhouse"] = Field(
        default="clickhouse", description="which backend this section configures"
    )
    dsn: SecretStr | None = Field(default=None, description="the writer's server (a secret)")
    reader_dsn: SecretStr | None = Field(
        default=None, description="the readers' account (a secret; see docs/warehouse.md)"
    )
    lineage_dsn: SecretStr | None = Field(
        default=None,
        description="the lineage writer's account (INSERT and DELETE on "
        "<database>_meta.lineage; a secret); unset: dsn",
    )
    database: str = Field(
        default="quarry",
        pattern=r"^[a-z_][a-z0-9_]{0,40}$",
        description="database of the curation views (and <database>_mirror, <database>_meta)",
    )
    reader_pool: int = Field(default=4, ge=1, description="idle reader connections kept")
    result_timezone: str = Field(
        default="Etc/UTC",
        description="zone name that timestamp-with-time-zone results carry in Arrow (values "
        "are UTC instants either way); Etc/UTC is what the DuckLake reader reports on a UTC "
        "host, so both backends return the same Arrow types",
    )

    def check_complete(self) -> None:
        """Refuse a section without the server's DSN (``WarehouseError``)."""
        self._require(dsn=self.dsn)

    @property
    def server_dsn(self) -> str:
        """``dsn`` as text, which must be set (see :meth:`check_complete`)."""
        self.check_complete()
        assert self.dsn is not None
        return self.dsn.get_secret_value()


def _backend_of(value: Any) -> str:
    """The union's tag: the section's ``backend``, DuckLake's when it names none."""
    if isinstance(value, dict):
        return str(value.get("backend", "ducklake"))
    return str(getattr(value, "backend", "ducklake"))


#: The warehouse section: DuckLake's or ClickHouse's, by ``backend``.
WarehouseConfig = Annotated[
    Annotated[DuckLakeConfig, Tag("ducklake")] | Annotated[ClickHouseConfig, Tag("clickhouse")],
    Discriminator(_backend_of),
]
