"""Curations: SQL in, manifest ID out."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.deps import Context, Curator
from service.api.schemas import CurationCreate, CurationPublic
from service.curation.build import CurationRequest, run_curation

router = APIRouter(prefix="/v1/curations", tags=["curations"])


@router.post("", status_code=201)
def create(
    body: CurationCreate, context: Context, principal: Curator, request: Request
) -> CurationPublic:
    """Run a curation and return its manifest (an existing one when the same curation already
    ran over the same data)."""
    curation = CurationRequest(body.sql, body.sample_spec, author=principal.name)
    with context.connect() as conn:
        result = run_curation(
            curation,
            context.warehouse(),
            conn,
            context.settings.paths.manifests,
            context.curation_limits(),
        )
    manifest_url = str(request.url_for("show", manifest_id=result.manifest_id))
    return CurationPublic(
        **result.to_dict(), manifest_url=manifest_url, arrow_url=manifest_url + "/arrow"
    )
