"""What one service process runs with: its own section and the parts it talks to, resolved
by the entry point (``quarry serve`` builds it from the ``quarry`` settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from curation.config import CurationConfig
from warehouse.config import WarehouseConfig


class ServiceConfig(BaseModel):
    """The HTTP service."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    start_timeout_s: float = Field(default=60.0, gt=0)
    max_body_bytes: int = Field(
        default=1 << 20, ge=0, description="request bodies above this many bytes get 413"
    )
    token_cache_s: float = Field(
        default=5.0, ge=0, description="seconds a token lookup is cached (revocation delay)"
    )
    sql_max_rows: int = Field(
        default=1_000_000, gt=0, description="rows POST /v1/sql may return at most"
    )
    debezium_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="longest expected gap between Debezium's requests to POST "
        "/v1/cdc/debezium; a Debezium-fed warehouse that hears nothing for 5 times this, or "
        "whose position stays put for 3 times this while the source's WAL is past it, reads "
        "as stalled (Debezium posts only when the source changes: on a source quiet for "
        "longer, quiet and stopped look the same)",
    )


class ServiceSettings(BaseModel):
    """The settings of one service process, every path and address resolved.

    :param operational_dsn: libpq connection string of the operational database.
    :param manifest_dir: folder of the manifest files the service builds and serves.
    :param url_file: where the service publishes the URL it bound.
    :param port_file: where the service remembers the port it bound, to take it again at the
        next start when ``service.port`` is 0 (none: any free port each time).
    """

    model_config = ConfigDict(frozen=True)

    service: ServiceConfig = ServiceConfig()
    curation: CurationConfig = CurationConfig()
    warehouse: WarehouseConfig
    operational_dsn: SecretStr
    manifest_dir: Path
    url_file: Path
    port_file: Path | None = None
