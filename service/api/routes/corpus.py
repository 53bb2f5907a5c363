"""What the corpus holds: episodes and hours by robot, task and site, success and QC flag
rates, stamp versions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from curation.corpus import corpus_stats
from service.api.deps import Context, Reader
from service.api.problems import problem_responses
from service.api.routes.sql import resolve_snapshot

router = APIRouter(prefix="/v1/corpus", tags=["corpus"])


class GroupStats(BaseModel):
    """Live episodes of one robot, task or site."""

    key: str | None
    episodes: int
    hours: float = Field(description="summed episode durations, in hours")
    success_rate: float | None = Field(description="fraction of successful episodes")


class FlagRate(BaseModel):
    flag: str
    episodes: int = Field(description="episodes raising this quality flag")
    rate: float | None = Field(description="fraction of all live episodes")


class StampCount(BaseModel):
    version: str | None
    episodes: int


class CorpusStats(BaseModel):
    """Every live (not retracted) episode at one warehouse snapshot."""

    snapshot_id: int
    episodes: int
    hours: float
    success_rate: float | None
    by_robot: list[GroupStats]
    by_task: list[GroupStats]
    by_site: list[GroupStats]
    quality_flags: list[FlagRate]
    stamps: dict[str, list[StampCount]] = Field(
        description="schema_version, pipeline_version and robot_sw_version: episodes per value"
    )


@router.get("/stats", responses=problem_responses(400, 404, 408, 503))
def stats(
    context: Context,
    _: Reader,
    snapshot_id: Annotated[
        int | None, Query(ge=0, description="a warehouse snapshot (default: the latest)")
    ] = None,
) -> CorpusStats:
    """Corpus statistics, all computed at one warehouse snapshot."""
    warehouse = context.warehouse()
    snapshot = resolve_snapshot(warehouse, snapshot_id)
    body = corpus_stats(
        warehouse,
        snapshot,
        timeout_s=context.settings.curation.timeout_s,
        max_rows=context.settings.service.sql_max_rows,
    )
    return CorpusStats.model_validate(body)
