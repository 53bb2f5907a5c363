"""What one service process runs with: its own section and the parts it talks to, resolved
by the entry point (``quarry serve`` builds it from the ``quarry`` settings)."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from curation.config import CurationConfig
from warehouse.config import S3Config, WarehouseConfig


class ServiceConfig(BaseModel):
    """The HTTP service."""

    host: str = Field(default="127.0.0.1", description="address the service binds")
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    start_timeout_s: float = Field(
        default=60.0, gt=0, description="how long `quarry up` waits for the service, seconds"
    )
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
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="Standard Webhooks secret ('whsec_' + base64 of 24 to 64 bytes) that "
        "Debezium Server's HTTP sink signs its requests with "
        "(debezium.sink.http.authentication.webhook.secret); unset: signed requests are "
        "refused",
    )
    jwt_secret: SecretStr | None = Field(
        default=None,
        min_length=32,
        description="HMAC key (32 characters at least, the same on every replica) of the "
        "JWTs POST /v1/auth/authenticate issues for Debezium's JWT authenticator; unset: "
        "the token endpoints answer 404",
    )
    jwt_max_minutes: int = Field(
        default=60, ge=1, description="longest JWT access-token lifetime granted, minutes"
    )
    jwt_max_refresh_minutes: int = Field(
        default=1440, ge=1, description="longest JWT refresh-token lifetime granted, minutes"
    )

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        text = value.get_secret_value().removeprefix("whsec_")
        try:
            key = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be 'whsec_' followed by base64") from None
        if not 24 <= len(key) <= 64:
            raise ValueError(f"must hold 24 to 64 bytes (Debezium's limits), not {len(key)}")
        return value


class ManifestsConfig(BaseModel):
    """Where the service keeps the manifest files it builds and serves: the state folder's
    ``manifests/`` (the default), or an S3 prefix, so that no replica keeps one on its disk
    (``s3`` as the warehouse's: endpoint, region, keys, ``use_ssl``, ``url_style``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = Field(
        default=None,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$",
        description="the manifest files in S3 instead (s3://bucket/prefix); unset: the "
        "state folder's manifests/",
    )
    s3: S3Config = S3Config()


class ServiceSettings(BaseModel):
    """The settings of one service process, every path and address resolved.

    :param operational_dsn: libpq connection string of the operational database.
    :param manifest_dir: folder of the manifest files the service builds and serves (when
        ``manifests.url`` is unset).
    :param url_file: where the service publishes the URL it bound.
    :param port_file: where the service remembers the port it bound, to take it again at the
        next start when ``service.port`` is 0 (none: any free port each time).
    :param cdc_source: what feeds the warehouse (``cdc.source``): reported by ``/readyz``.
    """

    model_config = ConfigDict(frozen=True)

    service: ServiceConfig = ServiceConfig()
    curation: CurationConfig = CurationConfig()
    warehouse: WarehouseConfig
    operational_dsn: SecretStr
    manifest_dir: Path
    manifests: ManifestsConfig = ManifestsConfig()
    url_file: Path
    port_file: Path | None = None
    cdc_source: Literal["pgoutput", "debezium"] = "pgoutput"
