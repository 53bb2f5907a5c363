"""Read-query preparation: accept one query statement only, and optionally pin it to one
DuckLake snapshot by adding ``AT (VERSION => n)`` to every relation it reads (CTE and subquery
names excluded), so that a manifest can be rebuilt exactly.

This is the engine side's last line of defense; the service's curation guard decides what a
user may write.
"""

from __future__ import annotations

from collections.abc import Collection

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import traverse_scope

from warehouse.errors import QueryError


def prepare_query(
    sql: str, snapshot_id: int | None = None, *, unpinned: Collection[str] = ()
) -> str:
    """``sql`` checked to be a single read query; rewritten to read ``snapshot_id`` if given.
    Tables named in ``unpinned`` (lower case; the caller's own Arrow tables, which have no
    versions) are read as they are."""
    try:
        statements = sqlglot.parse(sql, read="duckdb")
    except SqlglotError as error:
        raise QueryError(f"cannot parse the query: {error}", sql=sql) from error
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise QueryError("only a single SELECT statement can run here", sql=sql)
    if snapshot_id is None:
        return sql
    tree = statements[0]
    for scope in traverse_scope(tree):
        for source in scope.sources.values():
            if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
                continue
            if not (source.db or source.catalog) and source.name.lower() in unpinned:
                continue
            source.set("when", _at_version(snapshot_id))
    return tree.sql(dialect="duckdb")


def _at_version(snapshot_id: int) -> exp.HistoricalData:
    return exp.HistoricalData(
        this="AT", kind="VERSION", expression=exp.Literal.number(int(snapshot_id))
    )
