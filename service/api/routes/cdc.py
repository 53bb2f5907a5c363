"""CDC input over HTTP: change events in Debezium's envelope (Debezium Server's HTTP sink).

Debezium Server posts one event per request and retries any non-2xx answer, then stops: a
malformed event is answered 422 with the event's index and field and nothing of the request
is applied, so the connector halts at the bad event instead of skipping it. Every request
reports the connector's liveness to ``cdc_writers`` (``cdc/liveness.py``): its position
after an applied request, the error a refused one ends with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from cdc.debezium import SLOT_PREFIX, DebeziumResult, apply_debezium
from cdc.errors import CdcError, EventError, SourceConflictError
from cdc.liveness import Report, report, report_error
from service.api.deps import Admin, Context
from service.api.problems import problem_responses
from service.context import ServiceContext
from service.errors import ServiceError
from warehouse.base import Warehouse
from warehouse.errors import WarehouseError

router = APIRouter(prefix="/v1/cdc", tags=["cdc"])
log = logging.getLogger(__name__)
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
        result = await run_in_threadpool(_apply_and_report, context, body)
    except EventError as error:
        raise MalformedEventsError(error.message, index=error.index, field=error.field) from error
    except SourceConflictError as error:
        raise ConflictingSourceError(error.message, **error.context) from error
    return DebeziumAccepted(
        applied=result.applied,
        tombstones=result.tombstones,
        skipped=result.skipped,
        snapshot_id=result.snapshot_id,
        position_lsn=result.position_lsn,
    )


def _apply_and_report(context: ServiceContext, body: Any) -> DebeziumResult:
    """Apply the events, then report the connector's liveness (``cdc_writers``): its new
    position, or the error a refused request ends with. A report that cannot be written is
    logged; it never fails a request whose events are applied."""
    warehouse = context.warehouse()
    interval = context.settings.service.debezium_interval_s
    try:
        result = apply_debezium(warehouse, body)
    except (EventError, SourceConflictError) as error:
        _report_refusal(context, warehouse, error)
        raise
    position = result.position
    if position is not None:
        what = Report(
            slot=position.slot,
            kind="debezium",
            state="streaming",
            report_interval_s=interval,
            advance_interval_s=interval,
            position=position,
            keep_errors=True,
        )
        _report(context, lambda conn: report(conn, what))
    return result


def _report_refusal(context: ServiceContext, warehouse: Warehouse, error: CdcError) -> None:
    """A refused request is the last error of the connector that feeds the warehouse (its
    position's slot): Debezium retries it, then halts, and the status should say why."""
    try:
        position = warehouse.position()
    except WarehouseError:
        return
    if position is not None and position.slot.startswith(SLOT_PREFIX):
        message = f"{type(error).__name__}: {error.message}"
        _report(context, lambda conn: report_error(conn, position.slot, message))


def _report(context: ServiceContext, write: Callable[[psycopg.Connection[Any]], None]) -> None:
    try:
        with context.connect() as conn:
            write(conn)
    except psycopg.Error as error:
        log.warning("could not report the Debezium connector's liveness: %s", error)


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
