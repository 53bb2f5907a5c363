"""The settings of a CDC follower process: the source, the warehouse and the follower's own
section, from ``QUARRY_``-prefixed environment variables (nested sections with ``__``).

``python -m cdc`` builds these; the ``quarry`` settings extend them, so ``quarry cdc follow``
reads the same variables (``QUARRY_SOURCE_DSN``, ``QUARRY_WAREHOUSE__...``,
``QUARRY_CDC__...``). Nothing reads the environment at import time.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from cdc.config import CdcConfig
from warehouse.config import DuckLakeConfig, WarehouseConfig

#: The environment variable of the source database's connection string.
SOURCE_DSN_ENV = "QUARRY_SOURCE_DSN"


class FollowerSettings(BaseSettings):
    """Where a follower reads from and writes to, and how it follows."""

    model_config = SettingsConfigDict(
        env_prefix="QUARRY_", env_nested_delimiter="__", extra="ignore"
    )

    source_dsn: SecretStr | None = Field(
        default=None,
        description="libpq connection string of the operational Postgres (the CDC source); "
        "unset in a state folder: the embedded one",
    )
    warehouse: WarehouseConfig = Field(
        default_factory=DuckLakeConfig,
        description="the warehouse: DuckLake (default) or ClickHouse, by 'backend'",
    )
    cdc: CdcConfig = CdcConfig()
