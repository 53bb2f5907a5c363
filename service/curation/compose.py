"""Turns a checked curation into the query whose result becomes a manifest.

A curation names episodes (an ``id`` or ``episode_id`` column) and may name slices of them
(``start_ns``/``end_ns``) and any extra columns. The composed query joins it to the
``episodes`` view, which supplies what the loader needs (container URI, size, SHA-256, the
episode's time range) and drops episodes that are retracted or unknown. Built as a sqlglot
tree around the checked tree: no text of the user's is pasted into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from service.curation.guard import CheckedQuery, CurationRefusedError

EPISODES_VIEW = "episodes"
CURATION = "curation"
EPISODE = "episode"
MANIFEST = "manifest"
COUNTED = "counted"

# Columns the manifest itself defines; a curation's own columns of these names are not extras.
RESERVED = frozenset(
    {
        "id",
        "episode_id",
        "uri",
        "start_ns",
        "end_ns",
        "size_bytes",
        "sha256",
        "num_samples",
        "sample_offset",
    }
)


@dataclass(frozen=True)
class ComposedQuery:
    tree: exp.Select
    id_column: str
    sliced: bool
    extras: tuple[str, ...]

    def render(self, dialect: str = "duckdb") -> str:
        return self.tree.sql(dialect=dialect, comments=False)


def probe_query(checked: CheckedQuery) -> exp.Select:
    """``SELECT * FROM (<curation>) LIMIT 0``: learns the curation's columns without rows."""
    return exp.select("*").from_(checked.tree.subquery(CURATION)).limit(0)


def compose(checked: CheckedQuery, columns: list[str]) -> ComposedQuery:
    """The manifest query for a curation whose result has ``columns``."""
    names = set(columns)
    id_column = "episode_id" if "episode_id" in names else "id" if "id" in names else None
    if id_column is None:
        raise CurationRefusedError(
            "a curation must select the episode id as `id` or `episode_id` "
            "(e.g. SELECT * FROM episodes, or SELECT id FROM episodes WHERE ...)",
            reason="no_episode_id",
        )
    sliced = {"start_ns", "end_ns"} <= names
    extras = tuple(c for c in columns if c not in RESERVED)
    if len(set(extras)) != len(extras):
        raise CurationRefusedError(
            "the curation selects two columns with the same name", reason="duplicate_column"
        )
    selects = [
        exp.cast(_col(EPISODE, "id"), exp.DataType.build("varchar")).as_("episode_id"),
        _col(EPISODE, "uri").as_("uri"),
        _bound(sliced, "start_ns", exp.Greatest).as_("start_ns"),
        _bound(sliced, "end_ns", exp.Least).as_("end_ns"),
        _col(EPISODE, "size_bytes").as_("size_bytes"),
        _col(EPISODE, "sha256").as_("sha256"),
        *(_col(CURATION, name).as_(name) for name in extras),
    ]
    join_on = exp.EQ(this=_col(EPISODE, "id"), expression=_col(CURATION, id_column))
    tree = (
        exp.select(*selects)
        .from_(checked.tree.subquery(CURATION))
        .join(exp.to_table(EPISODES_VIEW).as_(EPISODE), on=join_on)
    )
    return ComposedQuery(tree, id_column, sliced, extras)


def stats_query(composed: exp.Select) -> exp.Select:
    """One aggregate over the per-episode statistics of the curated episodes."""
    where = exp.cast(exp.column("episode_id"), exp.DataType.build("varchar")).isin(
        query=_manifest_ids(composed)
    )
    return (
        exp.select(
            "field",
            "dim",
            "sum(count) AS count",
            "sum(sum) AS sum",
            "sum(sum_sq) AS sum_sq",
            "min(min) AS min",
            "max(max) AS max",
        )
        .from_("episode_stats")
        .where(where)
        .group_by("field", "dim")
        .order_by("field", "dim")
    )


def topics_query(composed: exp.Select) -> exp.Select:
    """The distinct topic lists of the curated episodes (one per camera rig, in practice)."""
    return (
        exp.select("topics")
        .distinct()
        .from_(EPISODES_VIEW)
        .where(exp.column("id").isin(query=_manifest_ids(composed)))
        .order_by("topics")
    )


def preview_query(composed: exp.Select, anchor_step_ns: int) -> exp.Select:
    """Episodes, slices, log time (integer nanoseconds) and samples per (robot, task) of the
    manifest ``composed`` would build, without building it. Samples count anchors every
    ``anchor_step_ns`` in each slice, as ``SampleSpec.count_samples`` does; slices without a
    sample are left out, as the build leaves them out."""
    step = exp.Literal.number(anchor_step_ns)
    span = exp.Greatest(
        this=exp.Sub(this=_col(MANIFEST, "end_ns"), expression=_col(MANIFEST, "start_ns")),
        expressions=[exp.Literal.number(0)],
    )
    samples = exp.IntDiv(
        this=exp.Paren(
            this=exp.Add(this=span, expression=exp.Sub(this=step, expression=exp.Literal.number(1)))
        ),
        expression=step.copy(),
    )
    counted = exp.select("*", samples.as_("num_samples")).from_(composed.subquery(MANIFEST))
    join_on = exp.EQ(this=_col(EPISODE, "id"), expression=_col(COUNTED, "episode_id"))
    return (
        exp.select(
            _col(EPISODE, "robot_id").as_("robot_id"),
            _col(EPISODE, "task_id").as_("task_id"),
            exp.Count(this=exp.Distinct(expressions=[_col(COUNTED, "episode_id")])).as_("episodes"),
            exp.Count(this=exp.Star()).as_("slices"),
            exp.Sum(
                this=exp.Sub(this=_col(COUNTED, "end_ns"), expression=_col(COUNTED, "start_ns"))
            ).as_("duration_ns"),
            exp.Sum(this=_col(COUNTED, "num_samples")).as_("samples"),
        )
        .from_(counted.subquery(COUNTED))
        .join(exp.to_table(EPISODES_VIEW).as_(EPISODE), on=join_on)
        .where(exp.GT(this=_col(COUNTED, "num_samples"), expression=exp.Literal.number(0)))
        .group_by(_col(EPISODE, "robot_id"), _col(EPISODE, "task_id"))
        .order_by(_col(EPISODE, "robot_id"), _col(EPISODE, "task_id"))
    )


def _manifest_ids(composed: exp.Select) -> exp.Select:
    return exp.select("episode_id").from_(composed.subquery(MANIFEST))


def _col(table: str, name: str) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def _bound(sliced: bool, name: str, pick: type[exp.Greatest] | type[exp.Least]) -> exp.Expr:
    """A slice bound clipped to the episode's own range, or the episode's bound."""
    if not sliced:
        return _col(EPISODE, name)
    own = exp.Coalesce(this=_col(CURATION, name), expressions=[_col(EPISODE, name)])
    return pick(this=own, expressions=[_col(EPISODE, name)])
