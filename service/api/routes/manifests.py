"""Manifests: list, describe, download (ETag = the manifest's SHA-256, Range supported)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import FileResponse

from manifests.manifest import open_manifest
from service.api.deps import Context, Reader
from service.api.schemas import ManifestDetail, ManifestPage, ManifestPublic
from service.errors import NotFoundError
from service.registry import get_manifest, list_manifests

router = APIRouter(prefix="/v1/manifests", tags=["manifests"])
ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.file"


@router.get("")
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


@router.get("/{manifest_id}")
def show(manifest_id: str, context: Context, _: Reader) -> ManifestDetail:
    """One manifest: its registry entry and the metadata recorded in the file."""
    with context.connect() as conn:
        row = get_manifest(conn, manifest_id)
    meta = open_manifest(_existing(row)).meta
    return ManifestDetail(**row, norm_stats=meta.norm_stats, format_version=meta.format_version)


@router.get(
    "/{manifest_id}/arrow",
    response_model=None,
    responses={200: {"content": {ARROW_MEDIA_TYPE: {}}}, 304: {}},
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
