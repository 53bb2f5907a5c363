"""Read-only SQL over the curation views, for exploration (notebooks, dashboards).

The same guard as curations decides what may run; the reader's engine limits (read-only
catalog role, no external access, memory limit, interruption) hold whatever passes it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, Field

from curation.guard import MAX_SQL_BYTES, CheckedQuery, CurationRefusedError, check_curation
from service.api.deps import Context, Reader
from service.api.encoding import (
    ARROW_STREAM,
    SNAPSHOT_HEADER,
    column_types,
    json_rows,
    to_ipc_stream,
)
from service.api.problems import problem_responses
from service.errors import BadRequestError, NotFoundError
from warehouse.base import CURATION_VIEWS, Warehouse

router = APIRouter(prefix="/v1/sql", tags=["sql"])
_VIEWS = frozenset(CURATION_VIEWS)


class SqlQuery(BaseModel):
    """One SELECT over the curation views, optionally at a warehouse snapshot."""

    sql: str = Field(
        min_length=1,
        max_length=MAX_SQL_BYTES,
        examples=["SELECT robot_id, count(*) AS n FROM episodes GROUP BY robot_id"],
    )
    snapshot_id: int | None = Field(
        default=None, ge=0, description="read this warehouse snapshot (default: the latest)"
    )
    max_rows: int | None = Field(
        default=None,
        ge=1,
        description="answer 422 past this many rows (capped by the service's limit)",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="seconds before the query is stopped with 408 (capped by the service's)",
    )


class SqlColumn(BaseModel):
    name: str
    type: str = Field(description="the Arrow type, e.g. int64, string, timestamp[us, tz=UTC]")


class SqlResult(BaseModel):
    """A query result as JSON (see docs/api.md for how Arrow values are written)."""

    columns: list[SqlColumn]
    rows: list[list[Any]]
    row_count: int
    snapshot_id: int


@router.post(
    "",
    response_model=SqlResult,
    responses={
        200: {
            "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
            "description": "The result: JSON by default, an Arrow IPC stream when the Accept "
            f"header asks for {ARROW_STREAM}.",
            "headers": {
                SNAPSHOT_HEADER: {
                    "description": "the warehouse snapshot the query read",
                    "schema": {"type": "integer"},
                }
            },
        },
        **problem_responses(400, 404, 408, 422, 503),
    },
)
def run_sql(
    body: SqlQuery,
    context: Context,
    _: Reader,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Run one read-only query; the result is JSON, or Arrow IPC when asked for."""
    checked = check_query(body.sql)
    warehouse = context.warehouse()
    snapshot = resolve_snapshot(warehouse, body.snapshot_id)
    table = warehouse.query_arrow(
        checked.render(warehouse.dialect),
        snapshot_id=snapshot,
        timeout_s=_capped(body.timeout_s, context.settings.curation.timeout_s),
        max_rows=int(_capped(body.max_rows, context.settings.service.sql_max_rows)),
    )
    headers = {SNAPSHOT_HEADER: str(snapshot)}
    if accept is not None and ARROW_STREAM in accept:
        return Response(to_ipc_stream(table), media_type=ARROW_STREAM, headers=headers)
    document = {
        "columns": column_types(table),
        "rows": json_rows(table),
        "row_count": table.num_rows,
        "snapshot_id": snapshot,
    }
    content = json.dumps(document, separators=(",", ":"), allow_nan=False)
    return Response(content, media_type="application/json", headers=headers)


def resolve_snapshot(warehouse: Warehouse, requested: int | None) -> int:
    """The snapshot to read: ``requested``, or the latest when it is ``None``."""
    latest = warehouse.current_snapshot()
    if requested is None:
        return latest
    if requested > latest:
        raise NotFoundError(
            f"warehouse snapshot {requested} does not exist; the latest is {latest}",
            snapshot_id=requested,
            latest_snapshot_id=latest,
        )
    return requested


def _capped(requested: float | None, limit: float) -> float:
    return limit if requested is None else min(requested, limit)


class QueryRefusedError(BadRequestError):
    """An exploration query the guard refused (the same rules as a curation's)."""

    title = "Query refused"


def check_query(sql: str) -> CheckedQuery:
    """``sql`` through the curation guard, its refusal titled as a query's, not a curation's."""
    try:
        return check_curation(sql, _VIEWS)
    except CurationRefusedError as error:
        raise QueryRefusedError(error.message, **error.context) from None
