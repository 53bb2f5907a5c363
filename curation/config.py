"""Settings of the curation engine: one pydantic section, built by the entry point."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CurationConfig(BaseModel):
    """Limits on one curation query (the engine enforces them, not only the guard), and how
    fresh its data must be."""

    timeout_s: float = Field(default=30.0, gt=0, description="seconds before interruption")
    max_rows: int = Field(default=50_000_000, gt=0, description="rows a curation may return")
    memory_limit: str = Field(default="2GB", description="DuckDB memory limit of the reader")
    max_lag_s: float | None = Field(
        default=None,
        gt=0,
        description="bound on a curation's warehouse lag (seconds the warehouse's data was "
        "behind the source when its snapshot was pinned); past it, or unknown, the curation "
        "is refused or warned about, by on_lag; unset: no bound",
    )
    on_lag: Literal["refuse", "warn"] = Field(
        default="refuse",
        description="past max_lag_s: refuse (409) or build and say so (lag_warning)",
    )
