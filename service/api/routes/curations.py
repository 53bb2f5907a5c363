"""Curations: SQL or filters in, manifest ID out; previews; asynchronous build jobs.

Handlers are ``async`` and await builds on the curation runtime's own threads, so a crowd of
curations never holds the event loop or the server's shared thread pool.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from curation.build import CurationRequest, check_request
from curation.cancel import CancelScope
from curation.filters import CurationFilters, compile_filters
from curation.jobs import Job
from service.api.deps import Curator, Reader
from service.api.problems import problem_responses
from service.api.runtime import Runtime
from service.api.schemas import (
    CurationCreate,
    CurationPreviewCreate,
    CurationPublic,
    JobPublic,
    PreviewPublic,
)

router = APIRouter(prefix="/v1/curations", tags=["curations"])
#: Response header of a curation built past its lag bound (``on_lag: warn``).
LAG_WARNING = "Quarry-Lag-Warning"


@router.post(
    "",
    status_code=201,
    response_model=CurationPublic,
    responses={
        202: {"model": JobPublic, "description": "Queued as a job (`Location`: the job)"},
        **problem_responses(400, 408, 409, 422, 503),
    },
)
async def create(
    body: CurationCreate,
    runtime: Runtime,
    principal: Curator,
    request: Request,
    response: Response,
    async_: Annotated[bool, Query(alias="async", description="queue as a job (202)")] = False,
) -> Any:
    """Build a curation's manifest (an existing one when the same curation already ran over
    the same data), registered with its name, tags and description. A curation that would
    hold no sample is refused (422, naming the snapshot) unless ``allow_empty``. With
    ``?async=true`` or ``"mode": "async"``: 202 and a job to poll. The answer carries
    ``warehouse_lag_s``; past ``curation.max_lag_s`` the curation is refused (409) or, with
    ``on_lag: warn``, built with ``lag_warning`` (and the ``Quarry-Lag-Warning`` header)."""
    curation = CurationRequest(
        _sql(body.sql, body.filters),
        body.sample_spec,
        principal.name,
        body.params,
        name=body.name,
        tags=tuple(body.tags),
        description=body.description,
        allow_empty=body.allow_empty,
    )
    if async_ or body.mode == "async":
        await runtime.quick(check_request, curation)  # refuse bad SQL now, not in the job
        record = {**body.model_dump(mode="json", exclude={"mode"}), "compiled_sql": curation.sql}

        def build(scope: CancelScope) -> dict[str, Any]:
            return runtime.curate(curation, scope).to_dict()

        job = await runtime.quick(runtime.jobs.submit, record, principal.name, build)
        public = _job_public(job, request)
        return JSONResponse(
            public.model_dump(mode="json"), status_code=202, headers={"Location": public.url}
        )
    result = await runtime.call(runtime.curate, curation)
    if result.lag_warning is not None:
        response.headers[LAG_WARNING] = result.lag_warning
    return _curation_public(result.to_dict(), request)


@router.post("/preview", responses=problem_responses(400, 408, 422, 503))
async def preview(
    body: CurationPreviewCreate, runtime: Runtime, principal: Reader
) -> PreviewPublic:
    """Episodes, slices, hours and samples by robot and task of what the curation would build
    now, without building it."""
    curation = CurationRequest(
        _sql(body.sql, body.filters), body.sample_spec, principal.name, body.params
    )
    result = await runtime.call(runtime.preview, curation)
    return PreviewPublic.model_validate(result.to_dict())


@router.get("/jobs/{job_id}", responses=problem_responses(404))
async def show_job(job_id: str, runtime: Runtime, _: Reader, request: Request) -> JobPublic:
    """A curation job: queued, running, succeeded (with its result), failed (with why) or
    cancelled. A job whose service process stopped reads as failed."""
    job = await runtime.quick(runtime.jobs.get, job_id)
    return _job_public(job, request)


@router.delete("/jobs/{job_id}", responses=problem_responses(404, 409))
async def cancel_job(job_id: str, runtime: Runtime, _: Curator, request: Request) -> JobPublic:
    """Cancel a queued or running job; a running warehouse query is interrupted. The answer
    may still say ``running`` (with ``cancel_requested``) for the moment the build takes to
    stop; poll the job until it says ``cancelled``."""
    job = await runtime.quick(runtime.jobs.cancel, job_id)
    return _job_public(job, request)


def _sql(sql: str | None, filters: CurationFilters | None) -> str:
    if filters is not None:
        return compile_filters(filters)
    assert sql is not None  # the schema requires exactly one
    return sql


def _curation_public(result: dict[str, Any], request: Request) -> CurationPublic:
    manifest_url = str(request.url_for("show", manifest_id=result["manifest_id"]))
    return CurationPublic(**result, manifest_url=manifest_url, arrow_url=manifest_url + "/arrow")


def _job_public(job: Job, request: Request) -> JobPublic:
    result = job.result
    if result is not None:
        result = _curation_public(result, request).model_dump(mode="json")
    url = str(request.url_for("show_job", job_id=job.id))
    fields = {k: v for k, v in vars(job).items() if k != "result"}
    return JobPublic(**fields, result=result, url=url)
