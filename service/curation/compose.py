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


def _col(table: str, name: str) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def _bound(sliced: bool, name: str, pick: type[exp.Greatest] | type[exp.Least]) -> exp.Expr:
    """A slice bound clipped to the episode's own range, or the episode's bound."""
    if not sliced:
        return _col(EPISODE, name)
    own = exp.Coalesce(this=_col(CURATION, name), expressions=[_col(EPISODE, name)])
    return pick(this=own, expressions=[_col(EPISODE, name)])
