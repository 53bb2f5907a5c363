"""The one settings object of a ``quarry`` process, built at the entry point.

Values come from, in order of precedence: explicit arguments (the CLI's flags), environment
variables prefixed ``QUARRY_`` (nested sections with ``__``, e.g. ``QUARRY_SERVICE__PORT``),
then the defaults here. Nothing reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, SecretStr

from cdc.settings import FollowerSettings
from curation.config import CurationConfig
from pipeline.config import PipelineConfig as PipelineQueueConfig
from quarry.errors import ConfigError
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import (
    CATALOG_DB,
    LINEAGE_ROLE,
    OPERATIONAL_DB,
    READER_ROLE,
    EmbeddedPostgres,
)
from service.settings import ManifestsConfig, ServiceConfig, ServiceSettings
from warehouse.config import ENV_PREFIX, DuckLakeConfig, S3Config, WarehouseConfig
from warehouse.errors import WarehouseError

SQL_ROOT = Path(__file__).resolve().parents[1] / "sql"
#: The environment variable of the ClickHouse backend's DSN (a secret: never a flag).
CLICKHOUSE_DSN_ENV = ENV_PREFIX + "DSN"


class PipelineConfig(PipelineQueueConfig):
    """The pipeline's section: its batches and queue limits (:mod:`pipeline.config`), and
    where the workers keep containers and landed recordings: the state folder's ``objects/``
    (the default, one machine), or an S3 prefix every worker reaches, so that a workflow
    resumed on another machine finds them (``s3`` as the warehouse's: endpoint, region, keys,
    ``use_ssl``, ``url_style``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    objects_url: str | None = Field(
        default=None,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$",
        description="containers and landed recordings in S3 (s3://bucket/prefix), for workers "
        "on several machines; unset: the state folder's objects/",
    )
    s3: S3Config = S3Config()


class Settings(FollowerSettings):
    """Settings for one ``quarry`` process: the follower's (source, warehouse, cdc) and the
    state folder, the service and the curation limits."""

    state_dir: Path = Field(
        default=Path(".quarry"),
        description="the state folder (`--state-dir`); unset: the nearest `.quarry/` with a "
        "stack here or above, else `./.quarry`",
    )
    sql_dir: Path = Field(
        default=SQL_ROOT,
        description="the .sql files: Postgres migrations, warehouse DDL, example curations",
    )
    service: ServiceConfig = ServiceConfig()
    curation: CurationConfig = CurationConfig()
    manifests: ManifestsConfig = ManifestsConfig()
    pipeline: PipelineConfig = PipelineConfig()

    @property
    def paths(self) -> StatePaths:
        return StatePaths.at(self.state_dir)

    def operational_dsn(self) -> str:
        if self.source_dsn is not None:
            return self.source_dsn.get_secret_value()
        return EmbeddedPostgres(self.paths).dsn(OPERATIONAL_DB)

    def warehouse_config(self) -> WarehouseConfig:
        """The warehouse section, the embedded stack's catalog and data folder filled in
        where DuckLake's are unset, the reader limits the curation section's.

        :raises ConfigError: a connection string the backend needs is not set.
        """
        limits: dict[str, object] = {
            "query_timeout_s": self.curation.timeout_s,
            "max_rows": self.curation.max_rows,
            "reader_memory_limit": self.curation.memory_limit,
        }
        section = self.warehouse
        if isinstance(section, DuckLakeConfig) and section.catalog_dsn is None:
            embedded = EmbeddedPostgres(self.paths)
            limits["catalog_dsn"] = SecretStr(embedded.dsn(CATALOG_DB))
            if section.reader_catalog_dsn is None:
                limits["reader_catalog_dsn"] = SecretStr(embedded.dsn(CATALOG_DB, user=READER_ROLE))
            if section.lineage_catalog_dsn is None and embedded.paths.pg_lineage_password.exists():
                lineage = embedded.dsn(CATALOG_DB, user=LINEAGE_ROLE)
                limits["lineage_catalog_dsn"] = SecretStr(lineage)
        if isinstance(section, DuckLakeConfig) and not (section.data_path or section.data_url):
            limits["data_path"] = self.paths.warehouse
        config = section.model_copy(update=limits)
        try:
            config.check_complete()
        except WarehouseError as error:
            raise ConfigError(error.message, **error.context) from None
        return config

    def service_settings(self) -> ServiceSettings:
        """What the HTTP service of this state folder runs with, embedded defaults resolved."""
        paths = self.paths
        return ServiceSettings(
            service=self.service,
            curation=self.curation,
            warehouse=self.warehouse_config(),
            operational_dsn=SecretStr(self.operational_dsn()),
            manifest_dir=paths.manifests,
            manifests=self.manifests,
            url_file=paths.service_url,
            port_file=paths.service_port,
            cdc_source=self.cdc.source,
        )
