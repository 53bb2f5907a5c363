"""The whole path, as a user runs it: recordings in, CDC, a curation, a training run out."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loader.delivery import stamp_matches
from manifests.manifest import open_manifest
from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import CORPUS_EPISODES, run_json, run_quarry


def test_curate_then_train_through_the_cli(corpus: Stack) -> None:
    state = corpus.paths.root
    curation = run_json(state, "curate", "--sql", "SELECT * FROM episodes")
    assert curation["rows"] == CORPUS_EPISODES and curation["samples"] > 0

    result = run_json(
        state,
        "train",
        "--manifest",
        curation["manifest_id"],
        "--steps",
        "6",
        "--nproc-per-node",
        "2",
        "--set",
        "data.num_workers=0",
    )
    summary = result["summary"]
    assert result["exit_code"] == 0
    assert summary["world_size"] == 2 and summary["steps"] == 6
    assert math.isfinite(summary["last_loss"])
    assert summary["cache"]["hits"] > 0
    checkpoints = Path(summary["checkpoints"]["path"])
    assert any(checkpoints.iterdir()), "a torch.distributed.checkpoint was written"
    # Every rank memory-mapped the one node-local copy the trainer fetched.
    local = state / "manifests" / f"{curation['manifest_id']}.arrow"
    assert open_manifest(local).verify() == curation["manifest_id"]


MANIFEST_ROUTE = "/v1/manifests/{manifest_id}/arrow"


def manifest_downloads(service_url: str) -> int:
    """Manifest files the service has sent (``GET .../arrow`` answered 200), from ``/metrics``."""
    text = httpx.get(f"{service_url}/metrics", timeout=30).text
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "quarry_http_request_duration_seconds_count"
        and sample.labels == {"method": "GET", "route": MANIFEST_ROUTE, "status": "200"}
    )


def test_cache_warm_then_train_download_the_manifest_once(corpus: Stack, tmp_path: Path) -> None:
    """On a training node of its own (a state folder that knows the service's URL and holds a
    token, no stack), ``cache warm`` brings the manifest onto the node and ``train`` finds it."""
    curation = run_json(corpus.paths.root, "curate", "--sql", "SELECT * FROM episodes")
    manifest_id = curation["manifest_id"]
    url = corpus.status().service_url
    assert url is not None
    node = tmp_path / "node"
    (node / "run").mkdir(parents=True)
    (node / "run" / "service.url").write_text(url)
    (node / "admin.token").write_text(corpus.paths.admin_token.read_text())
    before = manifest_downloads(url)

    warmed = run_json(node, "cache", "warm", "--manifest", manifest_id, "--no-progress")
    assert warmed["failed"] == {} and warmed["fetched"] == CORPUS_EPISODES
    assert manifest_downloads(url) == before + 1
    local = node / "manifests" / f"{manifest_id}.arrow"
    assert stamp_matches(local)

    args = ("--steps", "2", "--nproc-per-node", "2", "--set", "data.num_workers=0")
    result = run_json(node, "train", "--manifest", manifest_id, *args)
    assert result["exit_code"] == 0 and result["summary"]["steps"] == 2
    assert manifest_downloads(url) == before + 1  # the warmed copy, not a second download
    assert result["summary"]["cache"]["fills"] == 0  # and the warmed containers
    assert open_manifest(local).verify() == manifest_id


def test_train_on_unknown_manifest_fails_clearly(corpus: Stack) -> None:
    result = run_quarry(
        corpus.paths.root, "train", "--manifest", "f" * 64, "--steps", "1", "--json", check=False
    )
    assert result.returncode != 0


def test_train_on_several_nodes_needs_a_run_name(corpus: Stack) -> None:
    state = corpus.paths.root
    curation = run_json(state, "curate", "--sql", "SELECT * FROM episodes")
    args = ("train", "--manifest", curation["manifest_id"], "--nnodes", "2", "--steps", "1")
    result = run_quarry(state, *args, check=False)
    assert result.returncode == 2
    assert "--run-name" in result.stderr


@pytest.mark.slow
def test_demo_runs_end_to_end(state: Path) -> None:
    try:
        report = run_json(state, "demo", "--episodes", "4", "--steps", "6")
        assert report["episodes"] == 4
        assert report["manifest_rows"] >= 1
        assert report["training"]["exit_code"] == 0
        summary = report["training"]["summary"]
        assert summary["steps"] == 6
        assert report["cdc_lag_s"] is not None
    finally:
        run_quarry(state, "down", check=False)
