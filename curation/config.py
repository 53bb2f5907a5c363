"""Settings of the curation engine: one pydantic section, built by the entry point."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CurationConfig(BaseModel):
    """Limits on one curation query (the engine enforces them, not only the guard)."""

    timeout_s: float = Field(default=30.0, gt=0, description="seconds before interruption")
    max_rows: int = Field(default=50_000_000, gt=0, description="rows a curation may return")
    memory_limit: str = Field(default="2GB", description="DuckDB memory limit of the reader")
