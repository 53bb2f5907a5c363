"""Structured curations: filters over the ``episodes`` view, compiled to curation SQL.

The compiled query is built as a sqlglot tree (values become literals, never pasted text),
rendered in DuckDB's dialect and then checked by the same guard as hand-written SQL; that
checked text is what runs and what the manifest records. Semantics:

- list filters (``robots``, ``tasks``, ...) keep episodes whose value is in the list;
- ``exclude_flags`` drops episodes that raised any of the listed quality flags;
- version ranges are inclusive at both ends; ``robot_sw_version`` compares dotted versions
  numerically part by part (``1.10`` > ``1.9``); ``started_at`` is ``[start, end)``;
- ``labels``: the episode carries every listed label (any segment, or the whole episode);
- ``split``: an episode is in ``validation`` when the first 32 bits of
  ``md5(seed || ':' || id)`` fall below ``validation_fraction`` of the range, else ``train``;
- ``per_task_cap``: at most this many episodes per task, the ones with the smallest
  ``md5(seed || ':' || id)`` (applied after every other filter, the split included);
- ``segments``: one manifest row per labelled segment of a selected episode (its
  ``[start_ns, end_ns)``, integer nanoseconds of log time), with the label value as ``label``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    model_validator,
)
from sqlglot import exp

EPISODE = "e"
SELECTED = "selected"
SEGMENT = "l"
MAX_VALUES = 1000
_HASH_HEX_DIGITS = 8  # the split and the caps hash on the first 32 bits of md5

#: A name or value: no NUL (Postgres text cannot hold it, and the registry records the SQL).
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]
Names = Annotated[list[Name], Field(min_length=1, max_length=MAX_VALUES)]
DottedVersion = Annotated[str, Field(pattern=r"^\d{1,9}(\.\d{1,9}){0,7}$")]
EpisodeColumn = Literal[
    "robot_id",
    "robot_model",
    "task_id",
    "site",
    "operator",
    "success",
    "started_at",
    "duration_s",
    "steps",
    "schema_version",
    "pipeline_version",
    "robot_sw_version",
]


class _Strict(BaseModel):
    """No unknown fields, and no coercion of booleans and numbers (``"yes"`` is not true,
    ``"3"`` not 3): a filter means exactly what it says or is refused with a 422."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Strict):
    """An inclusive range of an integer stamp; either end may be open."""

    min: StrictInt | None = Field(default=None, ge=0)
    max: StrictInt | None = Field(default=None, ge=0)


class VersionRange(_Strict):
    """An inclusive range of dotted versions (``"3.1"``, ``"3.2.0"``), compared numerically."""

    min: DottedVersion | None = None
    max: DottedVersion | None = None


class TimeRange(_Strict):
    """A wall-clock range ``[start, end)``; timestamps need a UTC offset."""

    start: AwareDatetime | None = None
    end: AwareDatetime | None = None


class LabelMatch(_Strict):
    """A label key, and optionally the values that match (any value when omitted)."""

    key: Name
    values: Names | None = None


class Split(_Strict):
    """One part of a deterministic train/validation split by episode hash."""

    part: Literal["train", "validation"]
    validation_fraction: StrictFloat = Field(default=0.1, gt=0, lt=1)
    seed: Name = "quarry"


class CurationFilters(_Strict):
    """A curation as filters over the ``episodes`` view (see the module docstring)."""

    robots: Names | None = None
    robot_models: Names | None = None
    tasks: Names | None = None
    sites: Names | None = None
    operators: Names | None = None
    success: StrictBool | None = None
    exclude_flags: Names | None = None
    schema_version: IntRange | None = None
    pipeline_version: IntRange | None = None
    robot_sw_version: VersionRange | None = None
    robot_sw_versions: Names | None = None
    started_at: TimeRange | None = None
    labels: Annotated[list[LabelMatch], Field(min_length=1, max_length=32)] | None = None
    segments: LabelMatch | None = None
    split: Split | None = None
    per_task_cap: StrictInt | None = Field(default=None, ge=1)
    cap_seed: Name = "quarry"
    columns: Annotated[list[EpisodeColumn], Field(max_length=16)] = ["robot_id", "task_id"]

    @model_validator(mode="after")
    def _distinct_columns(self) -> CurationFilters:
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns lists a column twice")
        return self


def compile_filters(filters: CurationFilters) -> str:
    """The curation SQL (DuckDB dialect) of ``filters``; run it through the guard."""
    episodes = _episode_select(filters)
    tree = episodes if filters.segments is None else _segment_select(episodes, filters)
    return tree.sql(dialect="duckdb")


def _episode_select(filters: CurationFilters) -> exp.Select:
    names = ["id", *filters.columns]
    select = exp.select(*(_col(EPISODE, name) for name in names)).from_(
        exp.to_table("episodes").as_(EPISODE)
    )
    conditions = [
        *_value_conditions(filters),
        *_stamp_conditions(filters),
        *_label_conditions(filters),
    ]
    if filters.split is not None:
        conditions.append(_split_condition(filters.split))
    if conditions:
        select = select.where(exp.and_(*conditions))
    if filters.per_task_cap is not None:
        select = select.qualify(_cap_condition(filters.per_task_cap, filters.cap_seed))
    return select


def _value_conditions(filters: CurationFilters) -> list[exp.Expr]:
    lists = {
        "robot_id": filters.robots,
        "robot_model": filters.robot_models,
        "task_id": filters.tasks,
        "site": filters.sites,
        "operator": filters.operators,
        "robot_sw_version": filters.robot_sw_versions,
    }
    conditions: list[exp.Expr] = [
        _col(EPISODE, column).isin(*map(exp.Literal.string, values))
        for column, values in lists.items()
        if values is not None
    ]
    if filters.success is not None:
        conditions.append(
            exp.EQ(this=_col(EPISODE, "success"), expression=exp.Boolean(this=filters.success))
        )
    if filters.exclude_flags is not None:
        flagged = _related("episode_quality_flags", "q", "flag", filters.exclude_flags)
        conditions.append(exp.Not(this=flagged))
    return conditions


def _stamp_conditions(filters: CurationFilters) -> list[exp.Expr]:
    conditions: list[exp.Expr] = []
    for column, bounds in (
        ("schema_version", filters.schema_version),
        ("pipeline_version", filters.pipeline_version),
    ):
        if bounds is not None:
            conditions += _range(_col(EPISODE, column), bounds.min, bounds.max)
    if filters.robot_sw_version is not None:
        parts = exp.TryCast(
            this=exp.Split(
                this=_col(EPISODE, "robot_sw_version"), expression=exp.Literal.string(".")
            ),
            to=exp.DataType.build("INT[]", dialect="duckdb"),
        )
        low, high = filters.robot_sw_version.min, filters.robot_sw_version.max
        conditions += _range(parts, _version_array(low), _version_array(high))
    if filters.started_at is not None:
        start, end = filters.started_at.start, filters.started_at.end
        started = _col(EPISODE, "started_at")
        if start is not None:
            conditions.append(exp.GTE(this=started.copy(), expression=_timestamp(start)))
        if end is not None:
            conditions.append(exp.LT(this=started.copy(), expression=_timestamp(end)))
    return conditions


def _label_conditions(filters: CurationFilters) -> list[exp.Expr]:
    return [
        _related("episode_labels", f"l{i}", "key", [match.key], match.values)
        for i, match in enumerate(filters.labels or ())
    ]


def _split_condition(split: Split) -> exp.Expr:
    threshold = exp.Literal.string(_hex_fraction(split.validation_fraction))
    bucket = _hash_prefix(split.seed)
    if split.part == "validation":
        return exp.LT(this=bucket, expression=threshold)
    return exp.GTE(this=bucket, expression=threshold)


def _cap_condition(cap: int, seed: str) -> exp.Expr:
    order = exp.Order(
        expressions=[exp.Ordered(this=_hash(seed)), exp.Ordered(this=_col(EPISODE, "id"))]
    )
    rank = exp.Window(
        this=exp.RowNumber(), partition_by=[_col(EPISODE, "task_id")], order=order, over="OVER"
    )
    return exp.LTE(this=rank, expression=exp.Literal.number(cap))


def _segment_select(episodes: exp.Select, filters: CurationFilters) -> exp.Select:
    """One row per labelled segment of the selected episodes; segments of one episode that
    start together become one slice, the longest."""
    match = filters.segments
    assert match is not None
    keys = [_col(SELECTED, name) for name in ("id", *filters.columns)]
    on = exp.and_(
        exp.EQ(this=_col(SEGMENT, "episode_id"), expression=_col(SELECTED, "id")),
        *_label_match(SEGMENT, "key", [match.key], match.values),
        exp.Not(this=exp.Is(this=_col(SEGMENT, "start_ns"), expression=exp.Null())),
    )
    return (
        exp.select(
            *keys,
            _col(SEGMENT, "start_ns"),
            exp.Max(this=_col(SEGMENT, "end_ns")).as_("end_ns"),
            exp.Min(this=_col(SEGMENT, "value")).as_("label"),
        )
        .from_(exp.to_table(SELECTED))
        .join(exp.to_table("episode_labels").as_(SEGMENT), on=on)
        .group_by(*(k.copy() for k in keys), _col(SEGMENT, "start_ns"))
        .with_(SELECTED, as_=episodes)
    )


def _related(
    view: str, alias: str, column: str, values: list[str], label_values: list[str] | None = None
) -> exp.Exists:
    """``EXISTS`` a row of ``view`` for the episode whose ``column`` is one of ``values``
    (and, for labels, whose ``value`` is one of ``label_values``)."""
    where = exp.and_(
        exp.EQ(this=_col(alias, "episode_id"), expression=_col(EPISODE, "id")),
        *_label_match(alias, column, values, label_values),
    )
    inner = exp.select(exp.Literal.number(1)).from_(exp.to_table(view).as_(alias)).where(where)
    return exp.Exists(this=inner)


def _label_match(
    alias: str, column: str, values: list[str], label_values: list[str] | None
) -> list[exp.Expr]:
    matches: list[exp.Expr] = [_col(alias, column).isin(*map(exp.Literal.string, values))]
    if label_values is not None:
        matches.append(_col(alias, "value").isin(*map(exp.Literal.string, label_values)))
    return matches


def _range(
    column: exp.Expr, low: exp.Expr | int | None, high: exp.Expr | int | None
) -> list[exp.Expr]:
    bounds: list[exp.Expr] = []
    if low is not None:
        bounds.append(exp.GTE(this=column.copy(), expression=_literal(low)))
    if high is not None:
        bounds.append(exp.LTE(this=column.copy(), expression=_literal(high)))
    return bounds


def _literal(value: exp.Expr | int) -> exp.Expr:
    return value if isinstance(value, exp.Expr) else exp.Literal.number(value)


def _version_array(version: str | None) -> exp.Expr | None:
    if version is None:
        return None
    return exp.Array(expressions=[exp.Literal.number(int(p)) for p in version.split(".")])


def _timestamp(value: datetime) -> exp.Expr:
    text = value.astimezone(UTC).isoformat()
    return exp.cast(exp.Literal.string(text), exp.DataType.build("TIMESTAMPTZ"))


def _hash(seed: str) -> exp.Expr:
    """``md5(seed || ':' || e.id)``: a stable per-episode hash, lower-case hex."""
    keyed = exp.DPipe(
        this=exp.DPipe(this=exp.Literal.string(seed), expression=exp.Literal.string(":")),
        expression=_col(EPISODE, "id"),
        safe=True,
    )
    return exp.MD5(this=keyed)


def _hash_prefix(seed: str) -> exp.Expr:
    return exp.Substring(
        this=_hash(seed),
        start=exp.Literal.number(1),
        length=exp.Literal.number(_HASH_HEX_DIGITS),
    )


def _hex_fraction(fraction: float) -> str:
    """``fraction`` of the 32-bit range as 8 lower-case hex digits (string order = numeric)."""
    return f"{int(fraction * 16**_HASH_HEX_DIGITS):0{_HASH_HEX_DIGITS}x}"


def _col(table: str, name: str) -> exp.Column:
    return exp.column(name, table=table, quoted=True)
