"""``quarry cache warm | status | evict``: the real console script against the real stack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from loader.delivery import stamp_matches
from quarry.stack.lifecycle import Stack
from tests.fixtures.stack import CORPUS_EPISODES, run_json, run_quarry

GiB = 2**30


@pytest.fixture(scope="module")
def manifest_id(corpus: Stack) -> str:
    """A manifest of every episode of the corpus, made through ``POST /v1/curations``."""
    url = corpus.status().service_url
    token = corpus.paths.admin_token.read_text().strip()
    assert url is not None
    response = httpx.post(
        f"{url}/v1/curations",
        json={"sql": "SELECT * FROM episodes"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["manifest_id"])


def delta(after: dict[str, Any], before: dict[str, Any], *names: str) -> tuple[int, ...]:
    """Changes of the named node-wide counters between two ``cache status`` documents."""
    return tuple(after["metrics"][n] - before["metrics"][n] for n in names)


def warm(state: Path, manifest_id: str) -> dict[str, Any]:
    result: dict[str, Any] = run_json(
        state, "cache", "warm", "--manifest", manifest_id, "--no-progress"
    )
    return result


@pytest.mark.slow
def test_warm_status_evict_resume_and_repair(corpus: Stack, manifest_id: str) -> None:
    state = corpus.paths.root
    before = run_json(state, "cache", "evict")["status"]  # start empty, whatever ran before
    assert (before["objects"], before["used_bytes"]) == (0, 0)

    first = run_quarry(
        state, "cache", "warm", "--manifest", manifest_id, "--capacity", "1GiB", "--threads", "2"
    )
    assert "100%" in first.stderr  # the progress bar
    assert f"fetched       {CORPUS_EPISODES}" in first.stdout
    full = run_json(state, "cache", "status")
    assert full["capacity_bytes"] == GiB  # recorded by the warm-up's fills
    assert full["objects"] == CORPUS_EPISODES  # the containers; the manifest is not an object
    assert (full["pinned"], full["preparing"]) == (0, 0)
    assert delta(full, before, "misses", "fills", "hits") == (CORPUS_EPISODES,) * 2 + (0,)
    # The manifest is the node's verified copy in <state>/manifests, where `train` finds it.
    assert stamp_matches(state / "manifests" / f"{manifest_id}.arrow")
    assert delta(full, before, "bytes_fetched") == (full["used_bytes"],)

    files = sorted(p for p in (state / "cache" / "objects").rglob("*") if p.is_file())
    victim = next(p for p in files if p.name != manifest_id)
    good = victim.read_bytes()
    victim.write_bytes(good[: len(good) // 2])  # a damaged copy is found and fetched again
    repaired = warm(state, manifest_id)
    assert (repaired["fetched"], repaired["already_local"]) == (1, CORPUS_EPISODES - 1)
    assert victim.read_bytes() == good

    half = run_json(state, "cache", "evict", "--target-bytes", str(full["used_bytes"] // 2))
    assert half["status"]["used_bytes"] <= full["used_bytes"] // 2
    resumed = warm(state, manifest_id)  # a warm-up run again fetches only what is missing
    assert resumed["failed"] == {}
    assert resumed["fetched"] == half["evicted_objects"]
    after = run_json(state, "cache", "status")
    assert (after["objects"], after["used_bytes"]) == (full["objects"], full["used_bytes"])
    # Hits: the containers but the damaged one, then all that was not evicted.
    hits = 2 * CORPUS_EPISODES - 1 - half["evicted_objects"]
    assert delta(after, full, "corrupt", "hits") == (1, hits)

    emptied = run_json(state, "cache", "evict")
    assert emptied["evicted_objects"] == CORPUS_EPISODES
    assert (emptied["status"]["used_bytes"], emptied["status"]["objects"]) == (0, 0)


def test_bad_manifest_ids_fail_clearly(corpus: Stack) -> None:
    state = corpus.paths.root
    unknown = run_quarry(state, "cache", "warm", "--manifest", "0" * 64, check=False)
    assert unknown.returncode == 4 and "404" in unknown.stderr
    malformed = run_quarry(state, "cache", "warm", "--manifest", "../etc", check=False)
    # a malformed ID is bad input (exit 2), as in every command that takes a manifest ID
    assert malformed.returncode == 2 and "not a manifest ID" in malformed.stderr
    bad_size = run_quarry(state, "cache", "status", "--capacity", "lots", check=False)
    assert bad_size.returncode == 2 and "not a size" in bad_size.stderr


def test_a_capacity_larger_than_the_disk_is_capped_with_a_warning(tmp_path: Path) -> None:
    """A cache asked for more than its disk holds says so and reports the cap it really
    has (its own bytes plus the free space), which eviction keeps to."""
    free_before = shutil.disk_usage(tmp_path).free
    done = run_quarry(tmp_path, "cache", "status", "--capacity", "1000TB", "--json")
    status = json.loads(done.stdout)
    assert status["capacity_bytes"] == 10**15
    # other processes may free disk space while the command runs: its reading lies between
    free = max(free_before, shutil.disk_usage(tmp_path).free)
    assert 0 < status["effective_capacity_bytes"] <= free + status["used_bytes"]
    assert done.stderr.startswith("warning: the cache's capacity (1000000000000000 bytes)")
    assert "effective cap" in status["capacity_warning"]
    plain = run_quarry(tmp_path, "cache", "status", "--capacity", "1GB")
    assert "warning" not in plain.stderr and "effective" not in plain.stdout
