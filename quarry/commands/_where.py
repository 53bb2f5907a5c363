"""The episodes a ``quarry pipeline run --where PREDICATE`` selects: the predicate is parsed
on its own (one SQL expression, DuckDB's dialect), put into ``SELECT id FROM episodes WHERE
...``, checked by the curation guard here, and run by the service (``POST /v1/sql``, which
guards it again), keyset-paginated by id."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from curation.errors import CurationError
from curation.guard import check_curation
from quarry.client import ServiceClient
from quarry.errors import BadInputError
from warehouse.base import CURATION_VIEWS

#: Episode IDs asked of the service per request.
PAGE = 10_000


def selection_sql(predicate: str, after: str | None) -> str:
    """The guarded query of one page of the episodes ``predicate`` selects, after ``after``."""
    try:
        condition = sqlglot.parse_one(predicate, dialect="duckdb")
    except SqlglotError as error:
        raise BadInputError(f"--where is not one SQL expression: {error}") from None
    if isinstance(condition, exp.Query) or not isinstance(condition, exp.Expr):
        raise BadInputError("--where takes a condition (e.g. pipeline_version < 3), not a query")
    where: exp.Expr = exp.paren(condition)
    if after is not None:
        where = exp.and_(where, exp.GT(this=exp.column("id"), expression=exp.Literal.string(after)))
    query = exp.select("id").from_("episodes").where(where).order_by("id").limit(PAGE)
    try:
        checked = check_curation(query.sql(dialect="duckdb"), frozenset(CURATION_VIEWS))
    except CurationError as error:
        raise BadInputError(f"--where refused: {error}") from None
    return checked.render()


def selected_episodes(client: ServiceClient, predicate: str) -> list[str]:
    """Every live episode's ID that ``predicate`` selects, sorted."""
    ids: list[str] = []
    after: str | None = None
    while True:
        result = client.post_json("/v1/sql", {"sql": selection_sql(predicate, after)})
        page = [str(row[0]) for row in result["rows"]]
        ids.extend(page)
        if len(page) < PAGE:
            return ids
        after = page[-1]
