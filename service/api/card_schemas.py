"""The dataset card's body (``GET /v1/manifests/{id}/card``, :mod:`curation.card`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class CardGroup(BaseModel):
    """The manifest's episodes of one robot, task or site."""

    key: str
    episodes: int
    hours: float = Field(description="log time of their slices in the manifest, hours")
    success_rate: float | None = Field(description="fraction of successful episodes")


class CardFlag(BaseModel):
    flag: str
    episodes: int = Field(description="episodes raising this quality flag")
    rate: float | None = Field(description="fraction of the manifest's episodes")


class StampValue(BaseModel):
    version: str
    episodes: int


class StampRange(BaseModel):
    min: str | None = Field(description="lowest value (dotted versions compared as numbers)")
    max: str | None
    values: list[StampValue]


class FieldNormalization(BaseModel):
    """How the loader normalizes one field, per dimension (the file's statistics)."""

    count: int = Field(description="steps the statistics count")
    mean: list[float]
    std: list[float] = Field(description="population standard deviation, floored at 1e-6")
    min: list[float] | None
    max: list[float] | None


class ManifestCard(BaseModel):
    """A manifest's dataset card: contents at its pinned snapshot, normalization, provenance."""

    manifest_id: str
    name: str
    tags: list[str]
    description: str
    author: str
    created_at: datetime
    retired_at: datetime | None
    format_version: int
    slices: int
    samples: int
    size_bytes: int
    episodes: int
    episodes_described: int = Field(
        description="episodes the warehouse holds at the snapshot (equals episodes)"
    )
    hours: float = Field(description="log time of the manifest's slices, hours")
    success_rate: float | None
    by_robot: list[CardGroup]
    by_task: list[CardGroup]
    by_site: list[CardGroup]
    quality_flags: list[CardFlag]
    stamps: dict[str, StampRange] = Field(
        description="schema_version, pipeline_version and robot_sw_version"
    )
    normalization: dict[str, FieldNormalization] = Field(description="state and action")
    sql: str
    sample_spec: dict[str, Any]
    snapshot_id: int
    cdc_position: dict[str, Any] | None
