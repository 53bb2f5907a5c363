"""The one settings object of a control-plane process, built at the entry point.

Values come from, in order of precedence: explicit arguments (the CLI's flags), environment
variables prefixed ``QUARRY_`` (nested sections with ``__``, e.g. ``QUARRY_SERVICE__PORT``),
then the defaults here. Nothing reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.paths import StatePaths

SQL_ROOT = Path(__file__).resolve().parents[1] / "sql"


class ServiceConfig(BaseModel):
    """The HTTP service."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    start_timeout_s: float = Field(default=60.0, gt=0)


class Settings(BaseSettings):
    """Settings for one Quarry control-plane process."""

    model_config = SettingsConfigDict(
        env_prefix="QUARRY_", env_nested_delimiter="__", extra="ignore"
    )

    state_dir: Path = Path(".quarry")
    sql_dir: Path = SQL_ROOT
    service: ServiceConfig = ServiceConfig()

    @property
    def paths(self) -> StatePaths:
        return StatePaths.at(self.state_dir)
