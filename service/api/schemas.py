"""Request and response bodies (the ``XCreate / XPublic`` family)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

MAX_SQL_CHARS = 64 * 1024


class CurationCreate(BaseModel):
    """A curation: SQL over the curation views, and how samples are cut."""

    sql: str = Field(
        min_length=1, max_length=MAX_SQL_CHARS, examples=["SELECT * FROM episodes WHERE success"]
    )
    sample_spec: dict[str, Any] | None = Field(
        default=None, description="SampleSpec fields; omitted ones take their defaults"
    )


class CurationPublic(BaseModel):
    manifest_id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    reused: bool
    manifest_url: str
    arrow_url: str


class ManifestPublic(BaseModel):
    id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    cdc_position: str
    sql: str
    sample_spec: dict[str, Any]
    author: str
    created_at: datetime


class ManifestDetail(ManifestPublic):
    norm_stats: dict[str, Any]
    format_version: int


class ManifestPage(BaseModel):
    items: list[ManifestPublic]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")
