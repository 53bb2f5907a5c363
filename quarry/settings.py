"""The one settings object of a ``quarry`` process, built at the entry point.

Values come from, in order of precedence: explicit arguments (the CLI's flags), environment
variables prefixed ``QUARRY_`` (nested sections with ``__``, e.g. ``QUARRY_SERVICE__PORT``),
then the defaults here. Nothing reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from cdc.config import CdcConfig
from curation.config import CurationConfig
from quarry.errors import ConfigError
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import CATALOG_DB, OPERATIONAL_DB, READER_ROLE, EmbeddedPostgres
from service.settings import ServiceConfig, ServiceSettings
from warehouse.config import ClickHouseConfig, WarehouseConfig

SQL_ROOT = Path(__file__).resolve().parents[1] / "sql"
#: The environment variable of the ClickHouse backend's DSN (a secret: never a flag).
CLICKHOUSE_DSN_ENV = "QUARRY_WAREHOUSE__CLICKHOUSE__DSN"


class ClickHouseSection(BaseModel):
    """The ClickHouse backend's server (``backend = "clickhouse"``): ``dsn`` is the writer's
    (``http(s)://user:password@host:port``; ``chdb:///folder`` for chDB, in-process, one
    process per folder), ``reader_dsn`` the readers' account when set. Both are secrets:
    set them through the environment (``QUARRY_WAREHOUSE__CLICKHOUSE__DSN``), never a flag."""

    dsn: SecretStr | None = None
    reader_dsn: SecretStr | None = None
    database: str = Field(default="quarry", pattern=r"^[a-z_][a-z0-9_]{0,40}$")


class WarehouseSection(BaseModel):
    """Where the warehouse is. Empty means the embedded DuckLake of the state folder;
    ``backend = "clickhouse"`` (``QUARRY_WAREHOUSE__BACKEND``) selects ClickHouse, at
    ``clickhouse.dsn``."""

    backend: Literal["ducklake", "clickhouse"] = "ducklake"
    catalog_dsn: SecretStr | None = None
    reader_catalog_dsn: SecretStr | None = None
    data_path: Path | None = None
    clickhouse: ClickHouseSection = ClickHouseSection()


class Settings(BaseSettings):
    """Settings for one Quarry control-plane process."""

    model_config = SettingsConfigDict(
        env_prefix="QUARRY_", env_nested_delimiter="__", extra="ignore"
    )

    state_dir: Path = Path(".quarry")
    sql_dir: Path = SQL_ROOT
    service: ServiceConfig = ServiceConfig()
    curation: CurationConfig = CurationConfig()
    warehouse: WarehouseSection = WarehouseSection()
    cdc: CdcConfig = CdcConfig()
    source_dsn: SecretStr | None = Field(
        default=None, description="operational Postgres; empty means the embedded one"
    )

    @property
    def paths(self) -> StatePaths:
        return StatePaths.at(self.state_dir)

    def operational_dsn(self) -> str:
        if self.source_dsn is not None:
            return self.source_dsn.get_secret_value()
        return EmbeddedPostgres(self.paths).dsn(OPERATIONAL_DB)

    def warehouse_config(self) -> WarehouseConfig:
        """The warehouse section, with the embedded defaults filled in."""
        embedded = EmbeddedPostgres(self.paths)
        section = self.warehouse
        catalog = section.catalog_dsn or SecretStr(embedded.dsn(CATALOG_DB))
        reader = section.reader_catalog_dsn
        if reader is None and section.catalog_dsn is None:
            reader = SecretStr(embedded.dsn(CATALOG_DB, user=READER_ROLE))
        return WarehouseConfig(
            backend=section.backend,
            catalog_dsn=catalog,
            reader_catalog_dsn=reader,
            data_path=section.data_path or self.paths.warehouse,
            query_timeout_s=self.curation.timeout_s,
            max_rows=self.curation.max_rows,
            reader_memory_limit=self.curation.memory_limit,
            clickhouse=self._clickhouse_config(),
        )

    def _clickhouse_config(self) -> ClickHouseConfig | None:
        """The ClickHouse section of the warehouse config; ``None`` on DuckLake."""
        section = self.warehouse
        if section.backend != "clickhouse":
            return None
        if section.clickhouse.dsn is None:
            raise ConfigError(
                f"the ClickHouse warehouse backend needs its server's DSN: set {CLICKHOUSE_DSN_ENV}"
                " (e.g. https://user:password@host:8443)"
            )
        return ClickHouseConfig(
            dsn=section.clickhouse.dsn,
            reader_dsn=section.clickhouse.reader_dsn,
            database=section.clickhouse.database,
        )

    def service_settings(self) -> ServiceSettings:
        """What the HTTP service of this state folder runs with, embedded defaults resolved."""
        paths = self.paths
        return ServiceSettings(
            service=self.service,
            curation=self.curation,
            warehouse=self.warehouse_config(),
            operational_dsn=SecretStr(self.operational_dsn()),
            manifest_dir=paths.manifests,
            url_file=paths.service_url,
            cdc_status=paths.cdc_status,
        )
