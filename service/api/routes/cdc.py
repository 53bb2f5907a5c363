"""CDC input over HTTP: change events in Debezium's envelope (Debezium Server's HTTP sink).

Debezium Server posts one event per request and retries any non-2xx answer, then stops: a
malformed event is answered 422 with the event's index and field and nothing of the request
is applied, so the connector halts at the bad event instead of skipping it.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from cdc.debezium import apply_debezium
from cdc.errors import EventError, SourceConflictError
from service.api.deps import Admin, Context
from service.api.problems import problem_responses
from service.errors import ServiceError

router = APIRouter(prefix="/v1/cdc", tags=["cdc"])
MAX_BODY_BYTES = 64 << 20


class DebeziumAccepted(BaseModel):
    """What a request applied: change events, tombstones and logical messages skipped, the
    warehouse snapshot of the commit (``None`` when nothing was applied) and the position."""

    applied: int
    tombstones: int
    skipped: int
    snapshot_id: int | None
    position_lsn: str | None


class MalformedEventsError(ServiceError):
    """A change event is not a valid Debezium event for the warehouse's tables."""

    status = 422
    title = "Malformed change event"
    exit_code = 2


class BadBodyError(ServiceError):
    """The request body is not JSON, or too large."""

    status = 400
    title = "Bad request body"
    exit_code = 2


class ConflictingSourceError(ServiceError):
    """The warehouse is fed by another source."""

    status = 409
    title = "Warehouse follows another source"
    exit_code = 2


@router.post(
    "/debezium",
    responses=problem_responses(400, 409, 413, 422),
)
async def debezium(request: Request, context: Context, _: Admin) -> DebeziumAccepted:
    """Apply one Debezium change event, or a JSON array of them, in one warehouse commit.

    Events may carry the ``schema``/``payload`` wrapper or not, or come as CloudEvents;
    ``null`` items (tombstones) are skipped. Re-delivered events change nothing (each row
    keeps its newest ``source.lsn``).
    """
    body = await _json_body(request)
    try:
        result = await run_in_threadpool(apply_debezium, context.warehouse(), body)
    except EventError as error:
        raise MalformedEventsError(error.message, index=error.index, field=error.field) from error
    except SourceConflictError as error:
        raise ConflictingSourceError(error.message, **error.context) from error
    return DebeziumAccepted(**vars(result))


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise BadBodyError(
            f"the body is {len(raw)} bytes; send at most {MAX_BODY_BYTES} per request",
            size=len(raw),
        )
    if not raw.strip():
        return None  # an empty body is a tombstone's null value
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadBodyError(f"the body is not JSON: {error}") from error
