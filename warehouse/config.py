"""Settings of the warehouse: one pydantic section, built by the entry point and passed in."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class WarehouseConfig(BaseModel):
    """Where the warehouse lives and how its readers are limited.

    ``catalog_dsn`` is a libpq connection string for the DuckLake catalog database, e.g.
    ``host=/state/pg-socket user=postgres dbname=quarry_catalog``. Readers connect with
    ``reader_catalog_dsn`` when it is set: a SELECT-only, non-superuser role, so that a query
    cannot reach the catalog server's files through the Postgres extension.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["ducklake"] = "ducklake"
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
