"""Curations that can carry the manifest's columns through their own scan.

Most curations are one SELECT over ``episodes`` that filters rows and picks columns
(``SELECT id, robot_id FROM episodes WHERE ...``; every structured curation but segments).
Each of their rows comes from one ``episodes`` row, and its ``id`` is that row's id, so joining
the result back to the episodes by id (what the manifest query does in general) finds exactly
the row it came from. Such a curation can instead select the episode's own URI, time range,
size and checksum next to its columns: the same rows, without a second scan of the corpus.

:func:`carrier` decides whether a curation is of that kind, conservatively (anything
it does not recognise keeps the join), and :func:`with_columns` adds the columns.
"""

from __future__ import annotations

from sqlglot import exp

#: The one view a carrying curation reads.
EPISODES_VIEW = "episodes"
#: The arguments a carrying SELECT may have; any other (joins, GROUP BY, DISTINCT, a
#: sample, CTEs, ...) could make a row something other than one episode's.
_SELECT_ARGS = frozenset(
    {"expressions", "from", "from_", "where", "qualify", "windows", "order", "limit", "offset"}
)
_TABLE_ARGS = frozenset({"this", "alias"})


def carrier(tree: exp.Query, id_column: str, columns: list[str]) -> tuple[exp.Select, str] | None:
    """``tree`` and the name (alias) under which it reads ``episodes``, when every row of
    its result is one ``episodes`` row whose id is its ``id_column``; ``None`` otherwise.
    ``columns`` are the result's column names, as the engine reported them."""
    if not isinstance(tree, exp.Select) or columns.count(id_column) != 1:
        return None
    if any(value for key, value in tree.args.items() if key not in _SELECT_ARGS):
        return None
    source = _only_table(tree)
    if source is None or _aggregates(tree) or _orders_by_all(tree):
        return None
    if not _id_is_episode_id(tree.expressions, id_column, source):
        return None
    return tree, source


def with_columns(tree: exp.Select, source: str, columns: dict[str, str]) -> exp.Select:
    """A copy of ``tree`` that also selects ``source``'s column ``c`` as ``columns[c]``, for
    each ``c``; the names must be new to the result."""
    added = [
        exp.column(column, table=source, quoted=True).as_(alias, quoted=True)
        for column, alias in columns.items()
    ]
    return tree.copy().select(*added, copy=False)


def _only_table(tree: exp.Select) -> str | None:
    """The alias (or name) of the FROM clause's one table, when it is plain ``episodes``."""
    clause = tree.args.get("from_") or tree.args.get("from")
    table = clause.this if isinstance(clause, exp.From) else None
    if not isinstance(table, exp.Table) or table.name.lower() != EPISODES_VIEW:
        return None
    if any(value for key, value in table.args.items() if key not in _TABLE_ARGS):
        return None
    alias = table.args.get("alias")
    if alias is not None and (alias.args.get("columns") or not alias.name):
        return None  # renamed columns, e.g. episodes AS e(a, b, ...)
    return table.alias_or_name


def _aggregates(tree: exp.Select) -> bool:
    """Whether the SELECT itself aggregates (which folds rows together); aggregates inside
    window functions or subqueries do not count."""

    def prune(node: exp.Expr) -> bool:
        return node is not tree and isinstance(node, exp.Window | exp.Subquery | exp.Query)

    return any(isinstance(node, exp.AggFunc) for node in tree.walk(prune=prune))


def _orders_by_all(tree: exp.Select) -> bool:
    """``ORDER BY ALL`` sorts by every selected column: added columns would change it."""
    order = tree.args.get("order")
    if order is None:
        return False
    return any(
        isinstance(item.this, exp.Column | exp.Var) and item.this.name.lower() == "all"
        for item in order.expressions
    )


def _id_is_episode_id(projections: list[exp.Expr], id_column: str, source: str) -> bool:
    """Whether the result's ``id_column`` is the ``episodes`` row's own ``id``: one plain
    reference to it under that name, or (for ``id``) a plain ``*`` with nothing else named
    ``id``."""
    named = [p for p in projections if _output_name(p) == id_column]
    if named:
        return len(named) == 1 and _is_id_reference(named[0], source)
    if id_column != "id":
        return False
    stars = [p for p in projections if _is_star(p, source)]
    others = [p for p in projections if not _is_star(p, source)]
    plain = all(not isinstance(p, exp.Star | exp.Columns) for p in others)
    return len(stars) == 1 and plain and not any(p.find(exp.Columns) for p in others)


def _output_name(projection: exp.Expr) -> str:
    return projection.alias if isinstance(projection, exp.Alias) else projection.output_name


def _is_id_reference(projection: exp.Expr, source: str) -> bool:
    column = projection.this if isinstance(projection, exp.Alias) else projection
    return (
        isinstance(column, exp.Column)
        and isinstance(column.this, exp.Identifier)
        and column.name.lower() == "id"
        and column.table in ("", source)
        and not column.args.get("db")
        and not column.args.get("catalog")
    )


def _is_star(projection: exp.Expr, source: str) -> bool:
    """``*`` or ``<source>.*`` without EXCLUDE, REPLACE, RENAME or ILIKE."""
    if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
        star, table = projection.this, projection.table
    elif isinstance(projection, exp.Star):
        star, table = projection, ""
    else:
        return False
    return table in ("", source) and not any(star.args.values())
