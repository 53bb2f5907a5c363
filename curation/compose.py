"""Turns a checked curation into the query whose result becomes a manifest.

A curation names episodes (an ``id`` or ``episode_id`` column) and may name slices of them
(``start_ns``/``end_ns``) and any extra columns. The composed query adds what the loader
needs of each episode (container URI, size, SHA-256, the episode's time range) and drops ids
that name no live episode, in one pass over the data:

- a curation that is one SELECT over ``episodes`` whose rows are episodes (most are; see
  :mod:`curation.projection`) selects those columns itself, next to its own;
- any other is joined to the internal view ``episode_objects`` (one narrow row per live
  episode) on the raw episode UUID, never through the wide ``episodes`` view.

Either way it can carry more of the episode's columns, hidden, for the build (the topics, for
the camera set; robot and task, for a preview), so nothing runs the curation twice. Built as
a sqlglot tree around the checked tree: no text of the user's is pasted into SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from curation.guard import CheckedQuery, CurationRefusedError
from curation.projection import carrier, with_columns
from curation.render import render

#: Internal views (never in the curation allow-list), keyed by the raw episode UUID.
OBJECTS_VIEW = "episode_objects"
STATS_VIEW = "episode_stat_rows"
#: Name of the Arrow table of curated episode ids that the statistics query reads.
CURATED_IDS = "curated_episode_ids"
#: What the manifest needs of every episode, besides its id.
OBJECT_COLUMNS = ("uri", "start_ns", "end_ns", "size_bytes", "sha256")
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
    """The manifest query of a curation. ``hidden`` maps each carried column of
    ``episode_objects`` to its name in the result (unique among the curation's columns);
    the build uses and then drops them."""

    tree: exp.Select
    id_column: str
    sliced: bool
    extras: tuple[str, ...]
    hidden: dict[str, str]

    def render(self, dialect: str = "duckdb") -> str:
        return render(self.tree, dialect)


def probe_query(checked: CheckedQuery) -> exp.Select:
    """``SELECT * FROM (<curation>) LIMIT 0``: learns the curation's columns without rows."""
    return exp.select("*").from_(checked.tree.subquery(CURATION)).limit(0)


def compose(
    checked: CheckedQuery, columns: list[str], carry: tuple[str, ...] = ()
) -> ComposedQuery:
    """The manifest query for a curation whose result has ``columns``, carrying the
    ``episode_objects`` columns ``carry`` as hidden columns."""
    id_column, sliced, extras = _shape(columns)
    taken = {name.lower() for name in columns}
    hidden = _hidden_names(carry, taken)
    carried = carrier(checked.tree, id_column, columns)
    if carried is None:
        episode, query = _joined(checked, id_column)
    else:
        needed = tuple(dict.fromkeys(OBJECT_COLUMNS + carry))
        episode, query = _carried(*carried, id_column, _hidden_names(needed, taken))
    query.select(
        exp.cast(episode("id"), exp.DataType.build("varchar")).as_("episode_id"),
        episode("uri").as_("uri"),
        _bound(sliced, episode, "start_ns", exp.Greatest).as_("start_ns"),
        _bound(sliced, episode, "end_ns", exp.Least).as_("end_ns"),
        episode("size_bytes").as_("size_bytes"),
        episode("sha256").as_("sha256"),
        *(_col(CURATION, name).as_(name) for name in extras),
        *(episode(column).as_(alias) for column, alias in hidden.items()),
        copy=False,
    )
    return ComposedQuery(query, id_column, sliced, extras, hidden)


#: An episode's column in the composed query, by its ``episode_objects`` name.
EpisodeColumn = Callable[[str], exp.Expr]


def _shape(columns: list[str]) -> tuple[str, bool, tuple[str, ...]]:
    """The id column, whether the curation selects slices, and its extra columns."""
    names = set(columns)
    id_column = "episode_id" if "episode_id" in names else "id" if "id" in names else None
    if id_column is None:
        raise CurationRefusedError(
            "a curation must select the episode id as `id` or `episode_id` "
            "(e.g. SELECT * FROM episodes, or SELECT id FROM episodes WHERE ...)",
            reason="no_episode_id",
        )
    extras = tuple(c for c in columns if c not in RESERVED)
    if len(set(extras)) != len(extras):
        raise CurationRefusedError(
            "the curation selects two columns with the same name", reason="duplicate_column"
        )
    return id_column, {"start_ns", "end_ns"} <= names, extras


def _joined(checked: CheckedQuery, id_column: str) -> tuple[EpisodeColumn, exp.Select]:
    """The general case: the curation joined to ``episode_objects`` on the raw key. Only an
    id in the canonical text of a UUID (what ``episodes.id`` holds) names an episode, as
    when the join compared text; that condition sits on the curation's side, where it costs
    one check per curated row rather than a cast per episode."""
    curated = _col(CURATION, id_column)
    key = exp.TryCast(this=curated, to=exp.DataType.build("uuid"))
    canonical = exp.EQ(
        this=curated.copy(), expression=exp.cast(key.copy(), exp.DataType.build("varchar"))
    )
    query = (
        exp.select()
        .from_(checked.tree.subquery(CURATION))
        .join(
            exp.to_table(OBJECTS_VIEW).as_(EPISODE),
            on=exp.EQ(this=_col(EPISODE, "id"), expression=key),
        )
        .where(canonical)
    )
    return (lambda name: _col(EPISODE, name)), query


def _carried(
    tree: exp.Select, source: str, id_column: str, names: dict[str, str]
) -> tuple[EpisodeColumn, exp.Select]:
    """A curation that selects the columns of the episode it reads as ``source`` itself
    (see :mod:`curation.projection`), column ``c`` as ``names[c]``; its own id
    column is the episode's id (a NULL id names no episode, as in the join)."""
    inner = with_columns(tree, source, names)
    curated = _col(CURATION, id_column)
    query = (
        exp.select()
        .from_(inner.subquery(CURATION))
        .where(exp.Not(this=exp.Is(this=curated, expression=exp.Null())))
    )

    def episode(name: str) -> exp.Expr:
        return curated.copy() if name == "id" else _col(CURATION, names[name])

    return episode, query


def _hidden_names(columns: tuple[str, ...], taken: set[str]) -> dict[str, str]:
    """``_quarry_<column>`` for each of ``columns``, with more leading underscores while the
    name is one of the curation's own (``taken``, lower case: the engine's names are
    case-insensitive)."""
    hidden: dict[str, str] = {}
    for column in columns:
        alias = f"_quarry_{column}"
        while alias.lower() in taken or alias in hidden.values():
            alias = "_" + alias
        hidden[column] = alias
    return hidden


def stats_query() -> exp.Select:
    """Per field and dimension of the statistics of the episodes listed in the Arrow table
    :data:`CURATED_IDS` (column ``episode_id``): steps, minimum, maximum, and the lists of
    per-episode sums and sums of squares, which the build adds exactly (see
    :mod:`curation.norm`). Reads neither the curation nor ``episodes`` again."""
    ids = exp.select(
        exp.TryCast(this=exp.column("episode_id"), to=exp.DataType.build("uuid"))
    ).from_(CURATED_IDS)
    return (
        exp.select(
            "field",
            "dim",
            "sum(count) AS count",
            "min(min) AS min",
            "max(max) AS max",
            # ARRAY_AGG: DuckDB's list(), ClickHouse's groupArray() (which skips NULL terms,
            # as norm_stats does)
            exp.ArrayAgg(this=exp.column("sum")).as_("sums"),
            exp.ArrayAgg(this=exp.column("sum_sq")).as_("sums_sq"),
        )
        .from_(STATS_VIEW)
        .where(exp.column("episode_id").isin(query=ids))
        .group_by("field", "dim")
        .order_by("field", "dim")
    )


#: Columns a preview's composed query carries: it groups by them.
PREVIEW_CARRY = ("robot_id", "task_id")


def preview_query(composed: ComposedQuery, anchor_step_ns: int) -> exp.Select:
    """Episodes, slices, log time (integer nanoseconds) and samples per (robot, task) of the
    manifest ``composed`` would build, without building it; ``composed`` carries
    :data:`PREVIEW_CARRY`. Samples count anchors every ``anchor_step_ns`` in each slice, as
    ``SampleSpec.count_samples`` does; slices without a sample are left out, as the build
    leaves them out."""
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
    counted = exp.select("*", samples.as_("num_samples")).from_(composed.tree.subquery(MANIFEST))
    robot, task = (_col(COUNTED, composed.hidden[name]) for name in PREVIEW_CARRY)
    return (
        exp.select(
            robot.as_("robot_id"),
            task.as_("task_id"),
            exp.Count(this=exp.Distinct(expressions=[_col(COUNTED, "episode_id")])).as_("episodes"),
            exp.Count(this=exp.Star()).as_("slices"),
            exp.Sum(
                this=exp.Sub(this=_col(COUNTED, "end_ns"), expression=_col(COUNTED, "start_ns"))
            ).as_("duration_ns"),
            exp.Sum(this=_col(COUNTED, "num_samples")).as_("samples"),
        )
        .from_(counted.subquery(COUNTED))
        .where(exp.GT(this=_col(COUNTED, "num_samples"), expression=exp.Literal.number(0)))
        .group_by(robot.copy(), task.copy())
        .order_by(robot.copy(), task.copy())
    )


def _col(table: str, name: str) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def _bound(
    sliced: bool,
    episode: EpisodeColumn,
    name: str,
    pick: type[exp.Greatest] | type[exp.Least],
) -> exp.Expr:
    """A slice bound clipped to the episode's own range, or the episode's bound."""
    if not sliced:
        return episode(name)
    own = exp.Coalesce(this=_col(CURATION, name), expressions=[episode(name)])
    return pick(this=own, expressions=[episode(name)])
