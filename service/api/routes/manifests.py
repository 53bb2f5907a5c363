"""Manifests: list, describe, download (ETag = the manifest's SHA-256, Range supported),
rebuild at the pinned snapshot, and lineage (a manifest's episodes, the stale ones)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import FileResponse

from curation.registry import get_manifest, list_manifests, manifest_episodes
from manifests.manifest import open_manifest
from service.api.deps import Context, Curator, Reader
from service.api.problems import problem_responses
from service.api.runtime import Runtime
from service.api.schemas import (
    ManifestDetail,
    ManifestEpisode,
    ManifestEpisodePage,
    ManifestPage,
    ManifestPublic,
    RebuildPublic,
)
from service.context import ServiceContext
from service.errors import BadRequestError, NotFoundError

router = APIRouter(prefix="/v1/manifests", tags=["manifests"])
ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.file"


@router.get("", responses=problem_responses(400))
def list_(
    context: Context,
    _: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> ManifestPage:
    """Registered manifests, newest first."""
    with context.connect() as conn:
        rows, next_cursor = list_manifests(conn, limit, cursor)
    return ManifestPage(items=[ManifestPublic(**row) for row in rows], next_cursor=next_cursor)


@router.get("/{manifest_id}", responses=problem_responses(404))
def show(manifest_id: str, context: Context, _: Reader) -> ManifestDetail:
    """One manifest: its registry entry and the metadata recorded in the file."""
    with context.connect() as conn:
        row = get_manifest(conn, manifest_id)
    meta = open_manifest(_existing(row)).meta
    return ManifestDetail(**row, norm_stats=meta.norm_stats, format_version=meta.format_version)


@router.get(
    "/{manifest_id}/arrow",
    response_model=None,
    responses={
        200: {"content": {ARROW_MEDIA_TYPE: {}}},
        206: {"content": {ARROW_MEDIA_TYPE: {}}, "description": "The requested byte range"},
        304: {"description": "Not modified (If-None-Match)"},
        **problem_responses(404),
    },
)
def download(
    manifest_id: str,
    context: Context,
    _: Reader,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """The manifest file itself. Its ETag is its ID (the SHA-256 of its bytes)."""
    with context.connect() as conn:
        row = get_manifest(conn, manifest_id)
    etag = f'"{manifest_id}"'
    headers = {"ETag": etag, "Cache-Control": "public, max-age=31536000, immutable"}
    if if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers=headers)
    return FileResponse(
        _existing(row),
        media_type=ARROW_MEDIA_TYPE,
        headers=headers,
        filename=f"{manifest_id}.arrow",
    )


def _existing(row: dict[str, Any]) -> Path:
    path = Path(row["uri"])
    if not path.exists():
        raise NotFoundError(
            f"manifest {row['id']} is registered but its file is missing", manifest_id=row["id"]
        )
    return path


@router.post("/{manifest_id}/rebuild", responses=problem_responses(400, 404, 408, 422, 503))
async def rebuild(
    manifest_id: str, context: Context, runtime: Runtime, _: Curator
) -> RebuildPublic:
    """Rebuild the manifest from its recorded SQL and sample spec at its pinned warehouse
    snapshot, and say whether the bytes (so the ID) are identical. Nothing is registered."""
    path = await runtime.quick(_registered_file, context, manifest_id)
    meta = open_manifest(path).meta
    result = await runtime.call(runtime.rebuild, manifest_id, meta)
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
    with context.connect() as conn:
        rows, next_cursor = manifest_episodes(
            conn,
            manifest_id,
            pipeline_below=pipeline_version_below,
            limit=limit,
            after=_episode_cursor(cursor),
        )
    return ManifestEpisodePage(
        manifest_id=manifest_id,
        items=[ManifestEpisode(**row) for row in rows],
        next_cursor=next_cursor,
    )


def _registered_file(context: ServiceContext, manifest_id: str) -> Path:
    with context.connect() as conn:
        return _existing(get_manifest(conn, manifest_id))


def _episode_cursor(cursor: str | None) -> uuid.UUID | None:
    if cursor is None:
        return None
    try:
        return uuid.UUID(cursor)
    except ValueError:
        raise BadRequestError("malformed cursor; pass next_cursor back unchanged") from None
