"""Format versions through the service: a curation writes version 2 (``quarry.cdc_position``
one JSON object); a version-1 manifest registered in the stack still shows, downloads, has a
card and rebuilds at its pinned snapshot to the same ID (``POST /v1/manifests/{id}/rebuild``,
``quarry manifests rebuild``), in version 1.

The version-1 manifest is built here by the engine's version-1 writer, whose bytes
``tests/manifests/test_manifest_versions.py`` holds to a fixture the code before version 2
wrote."""

from __future__ import annotations

import json
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pyarrow.ipc as ipc

from curation.build import CurationLimits, CurationRequest, build_at, check_request, reuse_key
from curation.registration import CurationResult, ManifestAnnotation, register_manifest
from manifests.manifest import open_manifest
from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import run_json
from warehouse.ducklake.backend import DuckLakeWarehouse

SQL = "SELECT id, task_id, 'v1' AS case_ FROM episodes WHERE success"


def test_a_curation_writes_version_2_with_one_position_object(api: httpx.Client) -> None:
    built = api.post("/v1/curations", json={"sql": "SELECT id, 'v2' AS case_ FROM episodes"})
    body = built.json()
    metadata = ipc.open_file(pa.BufferReader(api.get(body["arrow_url"]).content)).schema.metadata
    assert metadata[b"quarry.format_version"] == b"2"
    position = json.loads(metadata[b"quarry.cdc_position"])
    assert isinstance(position, dict) and {"lsn", "lsn_text", "slot"} <= position.keys()
    detail = api.get(f"/v1/manifests/{body['manifest_id']}").json()
    assert (detail["format_version"], detail["cdc_position"]) == (2, position)


def register_v1(stack: Stack, lake: DuckLakeWarehouse) -> dict[str, Any]:
    """A version-1 manifest of :data:`SQL` at the lake's current snapshot, in the stack's
    manifest folder and registry, as a curation of the version before would have left it."""
    request = CurationRequest(SQL, {"anchor_stride": 4}, author="before-v2")
    checked, spec = check_request(request)
    snapshot = lake.current_snapshot()
    info, meta, lineage = build_at(
        checked,
        spec,
        snapshot,
        lake,
        CurationLimits(timeout_s=60),
        stack.paths.manifests,
        format_version=1,
    )
    result = CurationResult(
        info.manifest_id,
        info.num_rows,
        info.num_samples,
        info.size_bytes,
        snapshot,
        False,
        info.path,
    )
    with psycopg.connect(stack.settings.operational_dsn()) as conn:
        key = reuse_key(checked, spec, snapshot)
        annotation = ManifestAnnotation()
        write = lake.append_lineage
        register_manifest(conn, write, result, meta, key, "before-v2", annotation, lineage)
    return {"manifest_id": info.manifest_id, "path": info.path, "rows": info.num_rows}


def test_a_version_1_manifest_still_shows_and_rebuilds_to_the_same_id(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    v1 = register_v1(corpus, corpus_lake)
    manifest = open_manifest(v1["path"])
    assert manifest.meta.format_version == 1
    assert isinstance(manifest.cdc_position, str)  # the object's JSON text, as version 1 had it
    detail = api.get(f"/v1/manifests/{v1['manifest_id']}").json()
    assert detail["format_version"] == 1
    assert detail["cdc_position"] == json.loads(manifest.cdc_position)
    card = api.get(f"/v1/manifests/{v1['manifest_id']}/card").json()
    assert (card["format_version"], card["episodes"]) == (1, v1["rows"])
    assert card["cdc_position"] == json.loads(manifest.cdc_position)

    rebuilt = api.post(f"/v1/manifests/{v1['manifest_id']}/rebuild")
    assert rebuilt.status_code == 200, rebuilt.text
    body = rebuilt.json()
    assert body["identical"] and body["rebuilt_id"] == v1["manifest_id"]
    by_cli = run_json(corpus.paths.root, "manifests", "rebuild", v1["manifest_id"][:8])
    assert by_cli["identical"] and by_cli["rebuilt_id"] == v1["manifest_id"]
