"""Manifests: list, describe, edit (name, tags, description, retirement), download (ETag = the
manifest's SHA-256, Range supported; each download recorded as a pull), rebuild at the pinned
snapshot, lineage (a manifest's episodes, the stale ones), the dataset card, and garbage
collection of the manifest folder.

Every ``{manifest_id}`` is a manifest's ID or a unique prefix of at least 8 hex digits,
resolved here: 404 when no manifest has it, 400 (``reason: ambiguous_manifest_id``, with
``candidates``) when several do.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response

from curation.card import manifest_card
from curation.gc import collect_manifests
from curation.lineage import collect_lineage, manifest_episodes
from curation.registration import position_object
from curation.registry import (
    ManifestChange,
    get_manifest,
    list_manifests,
    pulls_of,
    record_pull,
    update_manifest,
)
from service.api.card_schemas import ManifestCard
from service.api.deps import Admin, Context, Curator, Reader
from service.api.markdown import MARKDOWN, card_markdown
from service.api.problems import problem_responses
from service.api.runtime import Runtime
from service.api.schemas import (
    GcCreate,
    GcPublic,
    ManifestDetail,
    ManifestEpisode,
    ManifestEpisodePage,
    ManifestPage,
    ManifestPublic,
    ManifestUpdate,
    PullSummary,
    RebuildPublic,
    Tag,
)
from service.context import ServiceContext
from service.errors import BadRequestError
from service.manifest_files import ARROW_MEDIA_TYPE, download_file, open_registered

router = APIRouter(prefix="/v1/manifests", tags=["manifests"])


@router.get("", responses=problem_responses(400))
def list_(
    context: Context,
    _: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
    tag: Annotated[Tag | None, Query(description="only manifests with this tag")] = None,
) -> ManifestPage:
    """Registered manifests, newest first (retired ones too, with ``retired_at``)."""
    with context.connect() as conn:
        rows, next_cursor = list_manifests(conn, limit, cursor, tag=tag)
    return ManifestPage(items=[public(row) for row in rows], next_cursor=next_cursor)


@router.get("/{manifest_id}", responses=problem_responses(400, 404))
def show(manifest_id: str, context: Context, _: Reader) -> ManifestDetail:
    """One manifest: its registry entry, its pulls and the metadata recorded in the file."""
    with context.connect() as conn:
        row = get_manifest(conn, manifest_id)
        pulls = pulls_of(conn, row["id"])
    meta = open_registered(context.manifests, row).meta
    last = pulls["last"] or {}
    summary = PullSummary(
        count=pulls["count"],
        last_at=last.get("pulled_at"),
        last_principal=last.get("principal"),
        last_run=last.get("run") or None,
    )
    return ManifestDetail(
        **public(row).model_dump(),
        norm_stats=meta.norm_stats,
        format_version=meta.format_version,
        pulls=summary,
    )


@router.patch("/{manifest_id}", responses=problem_responses(400, 404))
def edit(manifest_id: str, body: ManifestUpdate, context: Context, _: Curator) -> ManifestPublic:
    """Rename, describe, tag or untag, retire or bring back a manifest. Its file (so its ID)
    never changes; a retired manifest still opens and downloads until garbage-collected."""
    change = ManifestChange(
        name=body.name,
        description=body.description,
        add_tags=tuple(body.add_tags),
        remove_tags=tuple(body.remove_tags),
        retired=body.retired,
    )
    with context.connect() as conn:
        return public(update_manifest(conn, manifest_id, change))


@router.get(
    "/{manifest_id}/arrow",
    response_model=None,
    responses={
        200: {"content": {ARROW_MEDIA_TYPE: {}}},
        206: {"content": {ARROW_MEDIA_TYPE: {}}, "description": "The requested byte range"},
        304: {"description": "Not modified (If-None-Match)"},
        **problem_responses(400, 404),
    },
)
def download(
    manifest_id: str,
    context: Context,
    principal: Reader,
    request: Request,
    if_none_match: Annotated[str | None, Header()] = None,
    x_quarry_run: Annotated[
        str | None, Header(max_length=128, description="the training run pulling it")
    ] = None,
) -> Response:
    """The manifest file itself. Its ETag is its ID (the SHA-256 of its bytes). Each request
    is recorded as a pull (who, which run, which client) before the file is read, so that a
    garbage collection never takes a file a trainer pulled."""
    with context.connect() as conn:
        row = get_manifest(conn, manifest_id)
        record_pull(
            conn,
            row["id"],
            principal=principal.name,
            run=_clean(x_quarry_run),
            client=_clean(request.headers.get("user-agent")),
            address=request.client.host if request.client else "",
        )
    full_id = row["id"]
    etag = f'"{full_id}"'
    headers = {"ETag": etag, "Cache-Control": "public, max-age=31536000, immutable"}
    if if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers=headers)
    return download_file(context.manifests, row, request, headers)


@router.post("/{manifest_id}/rebuild", responses=problem_responses(400, 404, 408, 422, 503))
async def rebuild(
    manifest_id: str, context: Context, runtime: Runtime, _: Curator
) -> RebuildPublic:
    """Rebuild the manifest from its recorded SQL and sample spec at its pinned warehouse
    snapshot, in its own format version, and say whether the bytes (so the ID) are
    identical. Nothing is registered."""
    row = await runtime.quick(_registered, context, manifest_id)
    meta = (await runtime.call(open_registered, context.manifests, row)).meta
    result = await runtime.call(runtime.rebuild, row["id"], meta)
    return RebuildPublic(**result.to_dict())


@router.get("/{manifest_id}/episodes", responses=problem_responses(400, 404))
def episodes(
    manifest_id: str,
    context: Context,
    _: Reader,
    pipeline_version_below: Annotated[
        int | None, Query(ge=0, description="only episodes stamped below this (stale ones)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: str | None = None,
) -> ManifestEpisodePage:
    """The episodes a manifest holds, with their stamps and status (retracted ones too), by
    episode id; with ``pipeline_version_below=N`` only the stale ones, to reprocess."""
    after = _episode_cursor(cursor)
    with context.connect() as conn:
        full_id = get_manifest(conn, manifest_id)["id"]
        rows, next_cursor = manifest_episodes(
            conn,
            context.warehouse(),
            full_id,
            pipeline_below=pipeline_version_below,
            limit=limit,
            after=after,
        )
    return ManifestEpisodePage(
        manifest_id=full_id,
        items=[ManifestEpisode(**row) for row in rows],
        next_cursor=next_cursor,
    )


@router.get(
    "/{manifest_id}/card",
    response_model=ManifestCard,
    responses={
        200: {"content": {MARKDOWN: {"schema": {"type": "string"}}}},
        **problem_responses(400, 404, 408, 503),
    },
)
async def card(
    manifest_id: str,
    context: Context,
    runtime: Runtime,
    _: Reader,
    accept: Annotated[str | None, Header()] = None,
) -> Any:
    """The manifest's dataset card: episodes, hours, robots, tasks and sites, success rate,
    quality flags and stamp ranges at its pinned snapshot; mean and std per state and action
    dimension; SQL, snapshot and CDC position. JSON, or Markdown with
    ``Accept: text/markdown``."""
    row = await runtime.quick(_registered, context, manifest_id)
    manifest = await runtime.call(open_registered, context.manifests, row)
    body = await runtime.call(manifest_card, manifest, row, runtime.source, runtime.limits)
    if accept is not None and MARKDOWN in accept:
        return Response(card_markdown(body), media_type=f"{MARKDOWN}; charset=utf-8")
    return ManifestCard.model_validate(body)


@router.post("/gc", responses=problem_responses(400))
def gc(body: GcCreate, context: Context, _: Admin) -> GcPublic:
    """Delete the manifest folder's unreferenced files: files no registry row names (and
    partial writes), once an hour old, and retired manifests' files, except those anyone
    pulled or a label (a tag or a name) points at; and the lineage of manifests the registry
    never held. ``dry_run`` lists them and deletes nothing."""
    with context.connect() as conn:
        report = collect_manifests(conn, context.manifests, dry_run=body.dry_run)
        orphans = collect_lineage(conn, context.warehouse(), dry_run=body.dry_run)
    return GcPublic.model_validate({**report.to_dict(), "lineage": orphans})


def public(row: dict[str, Any]) -> ManifestPublic:
    """A registry row as the API shows it (the CDC position as an object)."""
    return ManifestPublic(**{**row, "cdc_position": position_object(row["cdc_position"])})


def _registered(context: ServiceContext, manifest_id: str) -> dict[str, Any]:
    with context.connect() as conn:
        return get_manifest(conn, manifest_id)


def _clean(value: str | None, limit: int = 200) -> str:
    """A header value as a registry text: printable, at most ``limit`` characters."""
    return "".join(c for c in (value or "") if c.isprintable())[:limit]


def _episode_cursor(cursor: str | None) -> uuid.UUID | None:
    if cursor is None:
        return None
    try:
        return uuid.UUID(cursor)
    except ValueError:
        raise BadRequestError("malformed cursor; pass next_cursor back unchanged") from None
