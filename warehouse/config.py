"""Settings of the warehouse: one pydantic section, built by the entry point and passed in."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class ClickHouseConfig(BaseModel):
    """The ClickHouse backend (scale-out): where the server is and how readers are limited.

    ``dsn`` is what ``clickhouse_connect.get_client(dsn=...)`` takes: ``http(s)://user:pw@host:
    8123`` for a server, or ``chdb:///path`` for chDB, ClickHouse in-process (one process per
    data folder: tests and single-process tools only). ``reader_dsn`` is the account the
    readers use when set; see docs/warehouse.md for its settings profile and grants.
    The warehouse lives in three databases: ``<database>`` (the curation views),
    ``<database>_mirror`` (mirrored tables) and ``<database>_meta`` (commits, metadata).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dsn: SecretStr
    reader_dsn: SecretStr | None = None
    database: str = Field(default="quarry", pattern=r"^[a-z_][a-z0-9_]{0,40}$")
    reader_pool: int = Field(default=4, ge=1, description="idle reader connections kept")
    result_timezone: str = Field(
        default="Etc/UTC",
        description="zone name that timestamp-with-time-zone results carry in Arrow (values "
        "are UTC instants either way); Etc/UTC is what the DuckLake reader reports on a UTC "
        "host, so both backends return the same Arrow types",
    )


class WarehouseConfig(BaseModel):
    """Where the warehouse lives and how its readers are limited.

    ``catalog_dsn`` is a libpq connection string for the DuckLake catalog database, e.g.
    ``host=/state/pg-socket user=postgres dbname=quarry_catalog``. Readers connect with
    ``reader_catalog_dsn`` when it is set: a SELECT-only, non-superuser role, so that a query
    cannot reach the catalog server's files through the Postgres extension.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["ducklake", "clickhouse"] = "ducklake"
    catalog_dsn: SecretStr
    data_path: Path = Field(description="folder of the Parquet data files")
    reader_catalog_dsn: SecretStr | None = None
    alias: str = Field(
        default="wh",
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="name the lake is attached under inside DuckDB",
    )
    query_timeout_s: float = Field(default=30.0, gt=0, description="seconds, per read query")
    max_rows: int | None = Field(default=None, gt=0, description="row cap of a read query")
    reader_memory_limit: str = "2GB"
    reader_threads: int = Field(default=2, ge=1)
    writer_threads: int = Field(
        default=1,
        ge=1,
        description="DuckDB threads of the writer; CDC batches are small, and one thread "
        "applies them with the least CPU on a busy machine",
    )
    snapshot_retain_s: float = Field(
        default=3600.0,
        ge=0,
        description="maintenance never expires a snapshot younger than this (seconds)",
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
    clickhouse: ClickHouseConfig | None = Field(
        default=None,
        description="the ClickHouse backend's section; required when backend is "
        "'clickhouse' (catalog_dsn and data_path are then unused)",
    )

    @model_validator(mode="after")
    def _backend_section(self) -> WarehouseConfig:
        if self.backend == "clickhouse" and self.clickhouse is None:
            raise ValueError("backend 'clickhouse' needs the 'clickhouse' section (its dsn)")
        return self
