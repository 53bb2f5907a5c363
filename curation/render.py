"""A checked tree as the warehouse's dialect writes it.

sqlglot transpiles DuckDB's ``len(x)`` to ClickHouse's ``CHAR_LENGTH(x)``, right for text
and an error for a list (ClickHouse's ``length`` counts an array's elements, but a string's
bytes, not its characters). Without the columns' types sqlglot cannot tell which one a
``len`` takes, so the rendering does: a ``len`` of a list literal, of a cast to a list type
or of a list column of the curation views (:data:`LIST_COLUMNS`) becomes an array size.
"""

from __future__ import annotations

from sqlglot import exp

#: The list-typed columns of the curation views (sql/warehouse/*/views.sql).
LIST_COLUMNS = frozenset({"quality_flags"})


def render(tree: exp.Expr, dialect: str) -> str:
    """``tree`` (DuckDB's dialect, unchanged) as SQL of ``dialect``, without comments."""
    if dialect == "clickhouse":
        tree = tree.transform(_list_length)
    return tree.sql(dialect=dialect, comments=False)


def _list_length(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Length) and _is_list(node.this):
        return exp.ArraySize(this=node.this.copy())
    return node


def _is_list(node: exp.Expr) -> bool:
    if isinstance(node, exp.Array):
        return True
    if isinstance(node, exp.Cast):
        return node.to.is_type(exp.DataType.Type.ARRAY)
    return isinstance(node, exp.Column) and node.name.lower() in LIST_COLUMNS
