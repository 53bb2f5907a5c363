"""The commands that match the HTTP API (`quarry episodes list|show|retract|restore`,
`quarry labels add|list|rm`, `quarry sql`, `quarry stats`), run as the real console script
against the session stack, and checked against the API and the warehouse."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import api_client, scratch_episodes, wait_for, warehouse_count
from tests.fixtures.stack import CORPUS_EPISODES, QUARRY, run_json, run_quarry
from warehouse.ducklake.backend import DuckLakeWarehouse


@pytest.fixture(scope="module")
def lake(corpus: Stack) -> Iterator[DuckLakeWarehouse]:
    with DuckLakeWarehouse(corpus.settings.warehouse_config()) as warehouse:
        yield warehouse


@pytest.fixture(scope="module")
def api(corpus: Stack) -> Iterator[httpx.Client]:
    with api_client(corpus) as client:
        yield client


def one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_episodes_list_and_show(corpus: Stack, api: httpx.Client) -> None:
    state = corpus.paths.root
    expected = api.get("/v1/episodes", params={"limit": 1000}).json()["items"]
    first = run_json(state, "episodes", "list", "--limit", "2")
    assert first["items"] == expected[:2] and first["next_cursor"] == expected[1]["id"]
    rest = run_json(state, "episodes", "list", "--limit", "1000", "--cursor", expected[1]["id"])
    assert rest["items"] == expected[2:] and rest["next_cursor"] is None
    text = run_quarry(state, "episodes", "list", "--limit", "2").stdout.splitlines()
    assert text[0].split() == [
        "id",
        "robot_id",
        "task_id",
        "status",
        "success",
        "steps",
        "started_at",
    ]
    assert (
        text[1].startswith(expected[0]["id"]) and text[-1] == f"more: --cursor {expected[1]['id']}"
    )
    robot = expected[0]["robot_id"]
    mine = run_json(state, "episodes", "list", "--robot", robot, "--limit", "1000")["items"]
    assert mine and {e["robot_id"] for e in mine} == {robot}

    shown = run_json(state, "episodes", "show", expected[0]["id"])
    assert shown == api.get(f"/v1/episodes/{expected[0]['id']}").json()
    text = run_quarry(state, "episodes", "show", expected[0]["id"]).stdout
    assert f"episode   {expected[0]['id']}" in text and shown["uri"] in text
    missing = run_quarry(state, "episodes", "show", str(uuid.uuid4()), check=False)
    assert "no episode" in one_error_line(missing, 4)


def test_episodes_retract_and_restore(corpus: Stack, lake: DuckLakeWarehouse) -> None:
    state = corpus.paths.root
    with scratch_episodes(corpus, lake, 1) as (episode_id,):
        visible = f"SELECT count(*) AS n FROM episodes WHERE id = '{episode_id}'"
        done = run_json(state, "episodes", "retract", episode_id, "--reason", "lens cap")
        assert (done["status"], done["already_retracted"]) == ("retracted", False)
        wait_for(lambda: warehouse_count(lake, visible) == 0, what="the retraction")
        again = run_quarry(state, "episodes", "retract", episode_id).stdout
        assert again.startswith(f"episode {episode_id} was already retracted")
        listed = run_json(state, "episodes", "list", "--status", "retracted", "--limit", "1000")
        assert episode_id in {e["id"] for e in listed["items"]}

        text = run_quarry(state, "episodes", "restore", episode_id).stdout
        assert text.strip() == f"episode {episode_id} restored"
        wait_for(lambda: warehouse_count(lake, visible) == 1, what="the restore by CDC")
        assert run_json(state, "episodes", "restore", episode_id)["already_active"]
        shown = run_json(state, "episodes", "show", episode_id)
        assert shown["status"] == "active" and shown["retractions"][0]["reason"] == "lens cap"


def test_labels_add_list_rm(corpus: Stack, lake: DuckLakeWarehouse) -> None:
    state = corpus.paths.root
    key = f"cli-{uuid.uuid4().hex[:8]}"
    with scratch_episodes(corpus, lake, 1) as (episode_id,):
        shown = run_json(state, "episodes", "show", episode_id)
        start, end = shown["start_ns"], shown["start_ns"] + 1_000_000_000
        added = run_json(state, "labels", "add", episode_id, f"{key}=whole")["labels"]
        segment = run_json(
            state,
            "labels",
            "add",
            episode_id,
            f"{key}=grasp",
            "--start-ns",
            str(start),
            "--end-ns",
            str(end),
        )["labels"]
        assert (segment[0]["start_ns"], segment[0]["end_ns"]) == (start, end)
        listed = run_json(state, "labels", "list", episode_id)["labels"]
        assert [x["id"] for x in listed] == [added[0]["id"], segment[0]["id"]]
        text = run_quarry(state, "labels", "list", episode_id).stdout.splitlines()
        assert text[0].split()[:3] == ["id", "key", "value"] and len(text) == 3

        removed = run_quarry(state, "labels", "rm", episode_id, str(added[0]["id"])).stdout
        assert removed.strip() == f"removed label {added[0]['id']} ({key}=whole)"
        assert [x["value"] for x in run_json(state, "labels", "list", episode_id)["labels"]] == [
            "grasp"
        ]
        count = f"SELECT count(*) AS n FROM episode_labels WHERE key = '{key}'"
        wait_for(lambda: warehouse_count(lake, count) == 1, what="the labels by CDC")
        again = run_quarry(state, "labels", "rm", episode_id, str(added[0]["id"]), check=False)
        assert f"has no label {added[0]['id']}" in one_error_line(again, 4)

        outside = run_quarry(
            state,
            "labels",
            "add",
            episode_id,
            f"{key}=x",
            "--start-ns",
            str(shown["end_ns"]),
            "--end-ns",
            str(shown["end_ns"] + 5),
            check=False,
        )
        assert "not inside" in one_error_line(outside, 2)
        for bad in (["novalue"], [f"{key}=x", "--start-ns", "5"]):
            refused = run_quarry(state, "labels", "add", episode_id, *bad, check=False)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert len(run_json(state, "labels", "list", episode_id)["labels"]) == 1  # nothing added


GROUPED = "SELECT robot_id, count(*) AS n FROM episodes GROUP BY robot_id ORDER BY robot_id"


def test_sql_as_table_json_and_arrow(corpus: Stack, api: httpx.Client, tmp_path: Path) -> None:
    state = corpus.paths.root
    expected = api.post("/v1/sql", json={"sql": GROUPED}).json()
    as_json = json.loads(run_quarry(state, "sql", GROUPED, "--format", "json").stdout)
    assert as_json["rows"] == expected["rows"] and as_json["columns"] == expected["columns"]
    text = run_quarry(state, "sql", GROUPED).stdout.splitlines()
    assert text[0].split() == ["robot_id", "n"]
    assert [line.split() for line in text[1:-1]] == [[r, str(n)] for r, n in expected["rows"]]
    assert text[-1].startswith(f"({len(expected['rows'])} rows, snapshot ")

    out = tmp_path / "result.arrow"
    said = run_quarry(state, "sql", GROUPED, "--format", "arrow", "--out", str(out)).stdout
    assert said.startswith(f"{out.stat().st_size} bytes of Arrow IPC at snapshot ")
    table = pa.ipc.open_stream(out.read_bytes()).read_all()
    assert table.schema.field("n").type == pa.int64()
    assert [list(row.values()) for row in table.to_pylist()] == expected["rows"]
    piped = subprocess.run(
        [QUARRY, "sql", GROUPED, "--format", "arrow", "--state-dir", str(state)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert pa.ipc.open_stream(piped.stdout).read_all().equals(table)

    refused = run_quarry(state, "sql", "SELECT * FROM read_csv('/etc/passwd')", check=False)
    assert "is not allowed" in one_error_line(refused, 2)
    capped = run_quarry(state, "sql", "SELECT id FROM episodes", "--max-rows", "1", check=False)
    one_error_line(capped, 2)


def test_sql_refuses_to_write_arrow_to_a_terminal(corpus: Stack) -> None:
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [QUARRY, "sql", "SELECT 1", "--format", "arrow", "--state-dir", str(corpus.paths.root)],
            stdout=follower,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert "give --out FILE or redirect stdout" in one_error_line(done, 2)


def test_stats_match_the_api(corpus: Stack, api: httpx.Client) -> None:
    state = corpus.paths.root
    found = run_json(state, "stats")
    assert found["episodes"] == CORPUS_EPISODES
    snapshot = found["snapshot_id"]
    at = api.get("/v1/corpus/stats", params={"snapshot_id": snapshot}).json()
    assert run_json(state, "stats", "--snapshot", str(snapshot)) == at
    text = run_quarry(state, "stats").stdout
    assert f"{CORPUS_EPISODES} episodes" in text
    headers = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert {"robot", "task", "site", "stamp"} <= headers
