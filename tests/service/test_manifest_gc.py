"""``quarry manifests gc`` (``POST /v1/manifests/gc``): the service's manifest folder loses the
files no registry row names (an hour after they were written), partial writes, and retired
manifests' files, but never a file a trainer pulled (each download is recorded) or one a label
(a tag or a name) points at; and the warehouse's lineage of manifests never registered;
``--dry-run`` lists the same and deletes nothing."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from loader.config import ManifestConfig
from loader.delivery import deliver_manifest
from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import api_client
from tests.fixtures.stack import run_json, run_quarry
from warehouse.ducklake.backend import DuckLakeWarehouse

HOUR_AND_A_HALF_AGO = time.time() - 5400


def curate(api: httpx.Client, case: str, **extra: Any) -> dict[str, Any]:
    sql = f"SELECT id, '{case}' AS gc_case FROM episodes"
    response = api.post("/v1/curations", json={"sql": sql, **extra})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def retire(api: httpx.Client, manifest_id: str) -> None:
    response = api.patch(f"/v1/manifests/{manifest_id}", json={"retired": True})
    assert response.status_code == 200, response.text


def stray(folder: Path, name: str, *, old: bool) -> Path:
    path = folder / name
    path.write_bytes(b"not registered")
    if old:
        os.utime(path, (HOUR_AND_A_HALF_AGO, HOUR_AND_A_HALF_AGO))
    return path


@pytest.fixture
def garden(api: httpx.Client, corpus: Stack) -> Iterator[dict[str, Any]]:
    """A manifest folder holding one file of every kind gc looks at."""
    folder = corpus.paths.manifests
    labels = {"tagged": {"tags": ["keep"]}, "named": {"name": "baseline"}}
    made = {
        case: curate(api, case, **labels.get(case, {}))
        for case in ("retired", "pulled", "tagged", "named", "in-use")
    }
    for case in ("retired", "pulled", "tagged", "named"):
        retire(api, made[case]["manifest_id"])
    pull = api.get(
        f"/v1/manifests/{made['pulled']['manifest_id']}/arrow",
        headers={"X-Quarry-Run": "run-42", "User-Agent": "test-trainer"},
    )
    assert pull.status_code == 200
    orphan = hashlib.sha256(b"orphan").hexdigest()
    paths = {
        "orphan": stray(folder, f"{orphan}.arrow", old=True),
        "young": stray(folder, f"{hashlib.sha256(b'young').hexdigest()}.arrow", old=False),
        "partial": stray(folder, ".tmp-4242-00ff00ff00ff00ff", old=True),
    }
    stamp = stray(folder, f"{orphan}.arrow.verified.json", old=True)
    yield {"made": made, "paths": paths, "stamp": stamp, "orphan": orphan}
    for path in (*paths.values(), stamp):
        path.unlink(missing_ok=True)


def test_dry_run_lists_what_gc_then_deletes(
    api: httpx.Client, corpus: Stack, garden: dict[str, Any]
) -> None:
    state, made, paths = corpus.paths.root, garden["made"], garden["paths"]
    retired_path = corpus.paths.manifests / f"{made['retired']['manifest_id']}.arrow"
    planned = run_json(state, "manifests", "gc", "--dry-run")
    assert planned["dry_run"]
    deleted = {(f["path"], f["reason"]) for f in planned["deleted"]}
    assert deleted == {
        (str(paths["orphan"]), "unregistered"),
        (str(paths["partial"]), "partial"),
        (str(retired_path), "retired"),
    }
    kept = {k["manifest_id"]: (k["reason"], k["detail"]) for k in planned["kept"]}
    assert kept[made["tagged"]["manifest_id"]] == ("tagged", "tagged keep")
    assert kept[made["named"]["manifest_id"]] == ("named", "named 'baseline'")
    reason, detail = kept[made["pulled"]["manifest_id"]]
    assert reason == "pulled" and "by local-admin for run run-42" in detail
    assert all(Path(path).exists() for path, _ in deleted)  # a dry run deletes nothing
    text = run_quarry(state, "manifests", "gc", "--dry-run").stdout
    assert f"would delete {retired_path} (retired, " in text

    done = run_json(state, "manifests", "gc")
    assert {(f["path"], f["reason"]) for f in done["deleted"]} == deleted
    assert done["freed_bytes"] == planned["freed_bytes"] > 0
    assert not any(Path(path).exists() for path, _ in deleted)
    assert not garden["stamp"].exists()  # the orphan's verification stamp went with it
    assert paths["young"].exists()  # written within the hour: a build may be registering it
    for case in ("pulled", "tagged", "named", "in-use"):
        assert (corpus.paths.manifests / f"{made[case]['manifest_id']}.arrow").exists()
    assert run_json(state, "manifests", "gc")["deleted"] == []


def test_a_collected_manifest_stays_registered_and_its_curation_builds_anew(
    api: httpx.Client, corpus: Stack
) -> None:
    made = curate(api, "collected")
    retire(api, made["manifest_id"])
    done = api.post("/v1/manifests/gc", json={}).json()
    assert made["manifest_id"] in {f["manifest_id"] for f in done["deleted"]}
    listed = api.get("/v1/manifests", params={"limit": 1000}).json()["items"]
    entry = next(m for m in listed if m["id"] == made["manifest_id"])
    assert entry["retired_at"] is not None
    gone = api.get(f"/v1/manifests/{made['manifest_id']}")
    assert gone.status_code == 404 and gone.json()["reason"] == "file_collected"
    lineage = api.get(f"/v1/manifests/{made['manifest_id']}/episodes").json()
    assert len(lineage["items"]) == made["rows"]  # the row and its lineage stay
    fresh = curate(api, "collected")
    assert not fresh["reused"] and fresh["manifest_id"] != made["manifest_id"]
    assert curate(api, "collected")["manifest_id"] == fresh["manifest_id"]  # reused from now


def test_the_loaders_download_is_recorded_as_a_pull(
    api: httpx.Client, corpus: Stack, tmp_path: Path
) -> None:
    made = curate(api, "delivered")
    url = corpus.status().service_url
    source = ManifestConfig(
        id=made["manifest_id"], service_url=url, token_file=corpus.paths.admin_token
    )
    deliver_manifest(source, tmp_path / "node", run="nightly-7")
    pulls = api.get(f"/v1/manifests/{made['manifest_id']}").json()["pulls"]
    assert (pulls["count"], pulls["last_run"], pulls["last_principal"]) == (
        1,
        "nightly-7",
        "local-admin",
    )
    retire(api, made["manifest_id"])
    kept = api.post("/v1/manifests/gc", json={"dry_run": True}).json()["kept"]
    assert {"manifest_id": made["manifest_id"], "reason": "pulled"}.items() <= next(
        k for k in kept if k["manifest_id"] == made["manifest_id"]
    ).items()


def test_gc_needs_the_admin_scope(corpus: Stack) -> None:
    out = run_quarry(corpus.paths.root, "tokens", "create", "--scope", "curate", "--name", "gc")
    token = out.stdout.strip().splitlines()[-1]
    with api_client(corpus) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        assert client.post("/v1/manifests/gc", json={"dry_run": True}).status_code == 403


def test_gc_deletes_the_lineage_of_a_manifest_that_never_registered(
    api: httpx.Client, corpus: Stack, corpus_lake: DuckLakeWarehouse
) -> None:
    orphan = "0f" * 32  # lineage written, then the registration crashed before its row
    rows = pa.table({"episode_id": ["00000000-0000-4000-8000-000000000001"], "sha256": ["x"]})
    corpus_lake.append_lineage(orphan, rows)
    dry = run_json(corpus.settings.state_dir, "manifests", "gc", "--dry-run")
    assert orphan in dry["lineage"]
    assert orphan in corpus_lake.lineage_manifests()
    done = api.post("/v1/manifests/gc", json={"dry_run": False})
    assert done.status_code == 200, done.text
    assert orphan in done.json()["lineage"]
    assert orphan not in corpus_lake.lineage_manifests()
