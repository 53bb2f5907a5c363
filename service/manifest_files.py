"""The service's manifest files: a local folder or an S3 prefix (``manifests.url``), opened
and downloaded alike by the routes, whichever holds them."""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request, Response
from fastapi.responses import FileResponse, StreamingResponse

from manifests.manifest import Manifest
from manifests.objects import ManifestPlace, ObjectManifestStore
from manifests.store import ManifestStore
from service.errors import NotFoundError
from service.settings import ServiceSettings
from warehouse.config import S3Config

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.file"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def manifest_place(settings: ServiceSettings) -> ManifestPlace:
    """Where this service's manifests are: ``manifests.url`` in S3, else ``manifest_dir``."""
    section = settings.manifests
    if section.url is None:
        return ManifestStore(settings.manifest_dir)
    return ObjectManifestStore(section.url, storage_options(section.s3))


def storage_options(s3: S3Config) -> dict[str, Any]:
    """s3fs's options for the S3 section (the warehouse's shape: host[:port], keys, region)."""
    options: dict[str, Any] = {"client_kwargs": {"region_name": s3.region}}
    if s3.endpoint is not None:
        options["endpoint_url"] = f"{'https' if s3.use_ssl else 'http'}://{s3.endpoint}"
    if s3.key_id is not None:
        options["key"] = s3.key_id.get_secret_value()
    if s3.secret is not None:
        options["secret"] = s3.secret.get_secret_value()
    style = "path" if s3.url_style == "path" else "virtual"
    options["config_kwargs"] = {"s3": {"addressing_style": style}}
    return options


def open_registered(place: ManifestPlace, row: dict[str, Any]) -> Manifest:
    """The manifest file of registry row ``row``; 404 when it is not there."""
    return place.open_manifest(existing(place, row))


def existing(place: ManifestPlace, row: dict[str, Any]) -> str:
    """The location of ``row``'s file, which must be there (else 404, saying why)."""
    location = str(row["uri"])
    if not place.exists(location):
        retired = row.get("retired_at") is not None
        why = "retired and its file garbage-collected" if retired else "its file is missing"
        raise NotFoundError(
            f"manifest {row['id']} is registered but {why}",
            manifest_id=row["id"],
            reason="file_collected" if retired else "file_missing",
        )
    return location


def download_file(
    place: ManifestPlace, row: dict[str, Any], request: Request, headers: dict[str, str]
) -> Response:
    """The file of ``row`` as a response: a local file as Starlette serves one, an object
    streamed from S3 in blocks (one ``Range: bytes=a-b`` honoured with 206)."""
    location = existing(place, row)
    filename = f"{row['id']}.arrow"
    if isinstance(place, ManifestStore):
        return FileResponse(
            location, media_type=ARROW_MEDIA_TYPE, headers=headers, filename=filename
        )
    size = place.size(location)
    headers = {
        **headers,
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'attachment; filename="{filename}"',
    }
    span = _range(request.headers.get("range"), size)
    if span is None:
        start, end, status = 0, size, 200
    elif span == (-1, -1):
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
    else:
        start, end = span
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    headers["Content-Length"] = str(end - start)
    return StreamingResponse(
        place.iter_bytes(location, start, end),
        status_code=status,
        media_type=ARROW_MEDIA_TYPE,
        headers=headers,
    )


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a single ``bytes=`` range; ``None`` for the whole object (no
    header, or one this does not parse, as RFC 9110 lets a server); ``(-1, -1)`` when the
    range lies outside the object (416)."""
    match = _RANGE.match((header or "").strip())
    if match is None or match.group(0) == "bytes=-":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # the last N bytes
        start, end = max(size - int(last), 0), size
    else:
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    if start >= size or start >= end:
        return (-1, -1)
    return start, end
