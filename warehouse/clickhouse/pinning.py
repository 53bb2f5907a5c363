"""Read-query preparation for ClickHouse: one SELECT, over the curation views (and the
warehouse's own databases), each view pinned to a snapshot.

ClickHouse has no snapshots; the curation views are parameterized views that take the
snapshot to read, so ``FROM episodes`` becomes ``FROM quarry.episodes(snapshot = 42)`` (CTE
names excluded), and a mirrored table, ``FROM quarry_mirror.episodes``, its row versions
committed by then (every version, tombstones included: the raw mirror). Table functions, other
databases, SETTINGS and FORMAT clauses are refused.
This is the engine side's check; the service's curation guard decides what a user may write.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import traverse_scope

from warehouse.clickhouse.schema import DIALECT, LIVE_PREFIX, Databases
from warehouse.errors import QueryError

SNAPSHOT_PARAMETER = "snapshot"
_REFUSED_ARGS = ("settings", "format")


def pin_query(
    sql: str, names: Databases, snapshot: int, extra: frozenset[str] = frozenset()
) -> str:
    """``sql`` (ClickHouse dialect) checked and rewritten to read the views at ``snapshot``;
    the unqualified names in ``extra`` (the caller's temporary tables) stay as they are."""
    tree = _parse(sql)
    for node in tree.walk():
        if any(node.args.get(arg) for arg in _REFUSED_ARGS):
            raise QueryError("SETTINGS and FORMAT clauses are refused here", sql=sql)
    pinned: set[int] = set()
    for scope in traverse_scope(tree):
        for source in scope.sources.values():
            if isinstance(source, exp.Table):
                pinned.add(id(source))
                if (
                    source.db
                    or source.name not in extra
                    or not isinstance(source.this, exp.Identifier)
                ):
                    pinned.add(id(_check_or_pin(source, names, snapshot, sql)))
    for table in tree.find_all(exp.Table):
        if id(table) not in pinned and not _is_cte_reference(table):
            raise QueryError(f"cannot read {table.sql(dialect=DIALECT)} here", sql=sql)
    _name_columns(tree)
    return tree.sql(dialect=DIALECT)


def _name_columns(tree: exp.Expr) -> None:
    """Name qualified columns as DuckDB does, in the result and in every subquery and CTE
    (whose names the query around reads): ``l.start_ns`` is ``start_ns`` (ClickHouse would
    call it ``l.start_ns``), unless another column of that SELECT already takes the name.
    Computed columns keep each engine's own naming; curations alias them."""
    for select in list(tree.find_all(exp.Select)):
        taken = [p.alias_or_name for p in select.expressions if not _is_qualified(p)]
        for projection in list(select.expressions):
            if _is_qualified(projection) and projection.name not in taken:
                taken.append(projection.name)
                projection.replace(exp.alias_(projection.copy(), projection.name, quoted=True))


def _is_qualified(projection: exp.Expr) -> bool:
    return (
        isinstance(projection, exp.Column)
        and bool(projection.table)
        and isinstance(projection.this, exp.Identifier)
    )


def _parse(sql: str) -> exp.Query:
    try:
        statements = sqlglot.parse(sql, read=DIALECT)
    except SqlglotError as error:
        raise QueryError(f"cannot parse the query: {error}", sql=sql) from error
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise QueryError("only a single SELECT statement can run here", sql=sql)
    return statements[0]


def _check_or_pin(table: exp.Table, names: Databases, snapshot: int, sql: str) -> exp.Table:
    """Refuse ``table`` unless it is in the warehouse; pin it to ``snapshot``: a view (and
    a ``${meta}.live_*`` view) gets the snapshot parameter, a mirrored table becomes the row
    versions committed by then. Returns the table node the query now reads."""
    if not isinstance(table.this, exp.Identifier):
        raise QueryError("table functions never run here; read the curation views", sql=sql)
    if table.catalog or (table.db and table.db not in (names.views, names.mirror, names.meta)):
        raise QueryError(
            f"{table.sql(dialect=DIALECT)} is outside the warehouse; read the curation views",
            sql=sql,
        )
    if table.db in ("", names.views) or (
        table.db == names.meta and table.name.startswith(LIVE_PREFIX)
    ):
        table.set("this", exp.Anonymous(this=table.name, expressions=[_snapshot_arg(snapshot)]))
        table.set("db", exp.to_identifier(table.db or names.views))
    elif table.db == names.mirror:
        # Every version committed at or before the snapshot (a write in progress, or one
        # that failed, is invisible here as everywhere else).
        alias = table.alias or table.name
        inner = exp.Table(this=table.this.copy(), db=exp.to_identifier(names.mirror))
        committed = exp.LTE(
            this=exp.column("_commit"), expression=exp.Literal.number(int(snapshot))
        )
        versions = exp.select("*").from_(inner).where(committed).subquery(alias)
        table.replace(versions)
        return versions.find(exp.Table) or inner
    return table


def _snapshot_arg(snapshot: int) -> exp.EQ:
    return exp.EQ(this=exp.column(SNAPSHOT_PARAMETER), expression=exp.Literal.number(int(snapshot)))


def _is_cte_reference(table: exp.Table) -> bool:
    """Whether an unqualified ``table`` names a CTE of a query around it."""
    if table.db or not isinstance(table.this, exp.Identifier):
        return False
    node: exp.Expr | None = table.parent
    while node is not None:
        with_ = node.args.get("with_") or node.args.get("with")
        if isinstance(with_, exp.With) and any(
            cte.alias_or_name == table.name for cte in with_.expressions
        ):
            return True
        node = node.parent
    return False
