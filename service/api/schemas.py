"""Request and response bodies (the ``XCreate / XPublic`` family)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from curation.filters import CurationFilters
from curation.params import ParamValue

MAX_SQL_CHARS = 64 * 1024
MAX_PARAMS = 100
PARAMS_DESCRIPTION = (
    "values of the SQL's placeholders: a string literal '<name>' in the SQL is bound to "
    "params.name as one SQL literal; a placeholder left unfilled is refused (400)"
)


def params_field() -> Any:
    """The ``params`` field of a request that carries SQL."""
    return Field(
        default=None,
        max_length=MAX_PARAMS,
        description=PARAMS_DESCRIPTION,
        examples=[{"manifest_id": "9f2c41d0"}],
    )


def check_params(sql: str | None, params: dict[str, ParamValue] | None) -> None:
    """``params`` go with ``sql``, never with structured filters."""
    if params is not None and sql is None:
        raise ValueError("`params` fill placeholders of `sql`; filters take none")


MAX_LABELS = 1000
NO_NUL = r"^[^\x00]*$"  # Postgres text cannot hold NUL
ONE_LINE = r"^[^\x00-\x1f\x7f]*$"  # no control characters (a name is one line)
MAX_TAGS = 32

Tag = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/=+-]*$",
        examples=["baseline"],
        description="letters, digits and . _ : / = + -, starting with a letter or digit",
    ),
]
ManifestName = Annotated[
    str, Field(max_length=200, pattern=ONE_LINE, examples=["pick-cube successes, March"])
]
Description = Annotated[str, Field(max_length=10_000, pattern=NO_NUL)]


class CurationCreate(BaseModel):
    """A curation: SQL over the curation views or structured filters (exactly one), and how
    samples are cut. ``mode: async`` (or ``?async=true``) queues it as a job."""

    sql: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SQL_CHARS,
        examples=["SELECT * FROM episodes WHERE success"],
    )
    filters: CurationFilters | None = Field(
        default=None, description="compiled to SQL, which then passes the same guard"
    )
    params: dict[str, ParamValue] | None = params_field()
    sample_spec: dict[str, Any] | None = Field(
        default=None, description="SampleSpec fields; omitted ones take their defaults"
    )
    mode: Literal["sync", "async"] = "sync"
    name: ManifestName = Field(default="", description="the manifest's name, in the registry")
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    description: Description = ""
    allow_empty: bool = Field(
        default=False,
        description="register a manifest without a sample instead of refusing (422)",
    )

    @model_validator(mode="after")
    def _one_query(self) -> CurationCreate:
        if (self.sql is None) == (self.filters is None):
            raise ValueError("give exactly one of `sql` and `filters`")
        check_params(self.sql, self.params)
        return self


class CurationPreviewCreate(BaseModel):
    """A curation to preview (the same fields as a curation, never built)."""

    sql: str | None = Field(default=None, min_length=1, max_length=MAX_SQL_CHARS)
    filters: CurationFilters | None = None
    params: dict[str, ParamValue] | None = params_field()
    sample_spec: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_query(self) -> CurationPreviewCreate:
        if (self.sql is None) == (self.filters is None):
            raise ValueError("give exactly one of `sql` and `filters`")
        check_params(self.sql, self.params)
        return self


class PreviewTotals(BaseModel):
    episodes: int
    slices: int
    hours: float = Field(description="log time, hours")
    samples: int


class PreviewGroup(PreviewTotals):
    robot_id: str
    task_id: str


class PreviewPublic(BaseModel):
    sql: str = Field(description="the normalized SQL a build would run and record")
    snapshot_id: int
    sample_spec: dict[str, Any]
    totals: PreviewTotals
    groups: list[PreviewGroup]


class JobPublic(BaseModel):
    id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    author: str
    cancel_requested: bool
    result: dict[str, Any] | None = Field(description="the curation, once succeeded")
    error: dict[str, Any] | None = Field(description="kind, detail and context, once failed")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    url: str


class CurationPublic(BaseModel):
    manifest_id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    reused: bool
    name: str = Field(description="as the registry holds it (a reused manifest keeps its own)")
    tags: list[str]
    description: str
    manifest_url: str
    arrow_url: str
    warehouse_lag_s: float | None = Field(
        default=None,
        description="seconds the warehouse's data was behind the source when the snapshot "
        "was pinned, at most (null: unknown)",
    )
    lag_warning: str | None = Field(
        default=None,
        description="why the lag is past curation.max_lag_s, when on_lag is warn (also the "
        "Quarry-Lag-Warning header)",
    )


class ManifestPublic(BaseModel):
    id: str
    rows: int
    samples: int
    size_bytes: int
    snapshot_id: int
    cdc_position: dict[str, Any] | None = Field(
        description="the CDC position the warehouse had reached (lsn, commit_lsn, slot, ...)"
    )
    sql: str
    sample_spec: dict[str, Any]
    author: str
    created_at: datetime
    name: str
    tags: list[str]
    description: str
    retired_at: datetime | None = Field(description="when it was retired; null while in use")


class PullSummary(BaseModel):
    count: int = Field(description="downloads of the manifest file")
    last_at: datetime | None
    last_principal: str | None = Field(description="the token that pulled it last")
    last_run: str | None = Field(description="the training run that pulled it last, if named")


class ManifestDetail(ManifestPublic):
    norm_stats: dict[str, Any]
    format_version: int
    pulls: PullSummary


class ManifestUpdate(BaseModel):
    """An edit of a manifest's registry entry (its file never changes); omitted fields stay
    as they are."""

    name: ManifestName | None = None
    description: Description | None = None
    add_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    remove_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    retired: bool | None = Field(
        default=None,
        description="true: retire (its file may be garbage-collected unless pulled, tagged "
        "or named); false: bring back",
    )


class GcCreate(BaseModel):
    dry_run: bool = Field(default=False, description="list what would be deleted; delete nothing")


class GcFile(BaseModel):
    manifest_id: str | None = Field(description="null for a partial write")
    path: str
    size_bytes: int
    reason: Literal["unregistered", "retired", "partial"]


class GcKept(BaseModel):
    manifest_id: str
    reason: Literal["pulled", "tagged", "named"]
    detail: str


class GcPublic(BaseModel):
    dry_run: bool
    deleted: list[GcFile] = Field(description="deleted, or with dry_run what would be")
    kept: list[GcKept] = Field(description="retired manifests kept, and why")
    freed_bytes: int
    lineage: list[str] = Field(
        default_factory=list,
        description="manifest IDs whose lineage was deleted (or would be): the registry "
        "never held them (a registration that crashed between its two writes)",
    )


class ManifestPage(BaseModel):
    items: list[ManifestPublic]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class RebuildPublic(BaseModel):
    manifest_id: str
    rebuilt_id: str = Field(description="SHA-256 of the rebuilt bytes")
    identical: bool
    snapshot_id: int
    rows: int
    samples: int


class ManifestRef(BaseModel):
    id: str
    rows: int
    samples: int
    snapshot_id: int
    author: str
    created_at: datetime


class ManifestEpisode(BaseModel):
    episode_id: str
    pipeline_version: int
    schema_version: int
    robot_sw_version: str
    status: str


class ManifestEpisodePage(BaseModel):
    manifest_id: str
    items: list[ManifestEpisode]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class EpisodeManifests(BaseModel):
    episode_id: str
    manifests: list[ManifestRef]


class LabelCreate(BaseModel):
    """A label; with ``start_ns`` and ``end_ns`` (log time, integer nanoseconds, inside the
    episode) it labels the segment ``[start_ns, end_ns)``."""

    key: str = Field(min_length=1, max_length=200, pattern=NO_NUL, examples=["phase"])
    value: str = Field(max_length=1000, pattern=NO_NUL, examples=["grasp"])
    start_ns: int | None = None
    end_ns: int | None = None

    @model_validator(mode="after")
    def _segment(self) -> LabelCreate:
        if (self.start_ns is None) != (self.end_ns is None):
            raise ValueError("give both start_ns and end_ns, or neither")
        if self.start_ns is not None and self.end_ns is not None and self.end_ns <= self.start_ns:
            raise ValueError("end_ns must be greater than start_ns")
        return self


class LabelsCreate(BaseModel):
    labels: list[LabelCreate] = Field(min_length=1, max_length=MAX_LABELS)


class LabelPublic(BaseModel):
    id: int
    episode_id: str
    key: str
    value: str
    start_ns: int | None
    end_ns: int | None
    author: str
    created_at: datetime


class EpisodeLabels(BaseModel):
    episode_id: str
    labels: list[LabelPublic]


class RetractCreate(BaseModel):
    reason: str = Field(default="", max_length=1000, pattern=NO_NUL)


class RetractionPublic(BaseModel):
    episode_id: str
    status: Literal["retracted"]
    already_retracted: bool
    manifests: list[ManifestRef] = Field(description="existing manifests that hold the episode")


class EpisodeSummary(BaseModel):
    """One episode as the operational database holds it (retracted ones included)."""

    id: str
    robot_id: str
    task_id: str
    site: str
    operator: str
    started_at: datetime = Field(description="wall clock")
    start_ns: int = Field(description="log time, integer nanoseconds")
    end_ns: int
    steps: int
    success: bool
    status: Literal["active", "retracted"]
    pipeline_version: int


class EpisodePage(BaseModel):
    items: list[EpisodeSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class RetractionEntry(BaseModel):
    reason: str
    author: str
    created_at: datetime


class EpisodeDetail(EpisodeSummary):
    """An episode with its container, stamps, quality flags and retraction log."""

    ended_at: datetime
    control_hz: float
    uri: str
    size_bytes: int
    sha256: str
    topics: list[dict[str, Any]]
    schema_version: int
    robot_sw_version: str
    instruction: str | None = Field(
        default=None, description="its language instruction (a LeRobot task string), if any"
    )
    created_at: datetime
    updated_at: datetime
    quality_flags: list[str]
    labels: int = Field(description="how many labels it carries")
    manifests: int = Field(description="how many registered manifests hold it")
    retractions: list[RetractionEntry] = Field(description="who retracted it, when, why")


class RestorationPublic(BaseModel):
    episode_id: str
    status: Literal["active"]
    already_active: bool
