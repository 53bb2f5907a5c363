"""LeRobot in and out, proven with lerobot's own code: fixture datasets written by lerobot's
writer (tests/data/lerobot/) -> ``quarry ingest lerobot`` -> curate -> ``quarry export
lerobot`` -> lerobot's ``LeRobotDataset`` in the peer venv (built when missing) reads back the
same states and actions exactly, the same tasks and episode boundaries, and frames at
PSNR >= 35 dB against the source's frames. A synthetic mixed-rig curation is refused by
export, naming the camera sets, until ``--cameras`` picks a common set.

Takes about 2 minutes (a stack, lerobot's imports in three peer-venv runs, 2 synthetic
episodes), plus the peer venv's build the first time."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quarry.settings import Settings
from quarry.stack.postgres import OPERATIONAL_DB, EmbeddedPostgres
from tests.fixtures.postgres import private_folder
from tests.fixtures.stack import run_json, run_quarry

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "lerobot"
PEERS = ROOT / "benchmarks" / "peers_bench"
MIN_PSNR_DB = 35.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def peer_venv() -> None:
    """The peer venv, built by setup.sh if missing or stale (minutes the first time)."""
    done = subprocess.run(
        ["bash", str(PEERS / "setup.sh")], capture_output=True, text=True, timeout=1500, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def state() -> Iterator[Path]:
    with private_folder("quarry-test-lerobot-") as folder:
        state = folder / "state"
        try:
            assert run_json(state, "up")["healthy"]
            yield state
        finally:
            run_quarry(state, "down", check=False)


def quarry(state: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_quarry(state, *args, "--json", check=False)
    return done.returncode, json.loads(done.stdout or "null"), done.stderr


def read_back(export: Path, source: Path | None = None) -> dict[str, Any]:
    args = [str(export)] + (["--source", str(source)] if source else [])
    done = subprocess.run(
        [
            "bash",
            str(PEERS / "run.sh"),
            "--no-setup",
            "python",
            str(FIXTURES / "read_back.py"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def curate(state: Path, sql: str, want: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """The curation, polled until CDC has carried ``want`` episodes to the warehouse."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = run_json(state, "curate", "--sql", sql)
        if int(out["rows"]) >= want or time.monotonic() > deadline:
            return dict(out)
        time.sleep(0.5)


def episode_rows(state: Path, robot: str) -> list[tuple[Any, ...]]:
    dsn = EmbeddedPostgres(Settings(state_dir=state).paths).dsn(OPERATIONAL_DB)
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT instruction, steps, control_hz, robot_sw_version FROM episodes "
            "WHERE robot_id = %s ORDER BY instruction, steps",
            (robot,),
        ).fetchall()


def shortened_copy(folder: Path, episode: int) -> Path:
    """A copy of rig2 whose episode ``episode`` claims a video span 0.3 s short."""
    copy = folder / "rig2-short"
    shutil.copytree(FIXTURES / "rig2", copy)
    path = copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    column = "videos/observation.images.wrist/to_timestamp"
    values = table[column].to_pylist()
    values[episode] -= 0.3
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    pq.write_table(table, path)
    return copy


def test_rig2_round_trip(state: Path, peer_venv: None, tmp_path: Path) -> None:
    # A bad episode registers nothing and names file, episode and feature; the others go in.
    code, out, err = quarry(state, "ingest", "lerobot", str(shortened_copy(tmp_path, 1)))
    assert code == 2 and (out["registered"], out["failed"]) == (2, 1)
    (error,) = out["errors"]
    assert "episode 1:" in error["message"] and error["topic"] == "observation.images.wrist"
    assert error["file"].endswith("videos/observation.images.wrist/chunk-000/file-000.mp4")
    assert "episode 1" in err and "observation.images.wrist" in err
    assert len(episode_rows(state, "quarry_rig2")) == 2

    started = time.perf_counter()
    code, out, _ = quarry(state, "ingest", "lerobot", str(FIXTURES / "rig2"))
    ingest_s = time.perf_counter() - started
    assert code == 0 and (out["registered"], out["skipped"]) == (1, 2)
    code, out, _ = quarry(state, "ingest", "lerobot", str(FIXTURES / "rig2"), "--episodes", "0-2")
    assert code == 0 and (out["registered"], out["skipped"]) == (0, 3)
    rows = episode_rows(state, "quarry_rig2")
    assert [(r[0], r[1]) for r in rows] == [
        ("open the drawer", 30),
        ("pick up the red cube", 20),
        ("pick up the red cube", 24),
    ]
    assert {r[2] for r in rows} == {10.0}
    assert {r[3] for r in rows} == {f"lerobot:{FIXTURES / 'rig2'}@v3.0"} | {
        f"lerobot:{tmp_path / 'rig2-short'}@v3.0"
    }
    report = round_trip(state, tmp_path, "rig2", 3)
    print(f"\nrig2: ingest {ingest_s:.1f} s for the last episode; {report}")


def test_rig3_round_trip(state: Path, peer_venv: None, tmp_path: Path) -> None:
    code, out, _ = quarry(state, "ingest", "lerobot", str(FIXTURES / "rig3"), "--episodes", "1")
    assert code == 0 and out["registered"] == 1
    code, out, _ = quarry(state, "ingest", "lerobot", str(FIXTURES / "rig3"))
    assert code == 0 and (out["registered"], out["skipped"]) == (1, 1)
    report = round_trip(state, tmp_path, "rig3", 2, "av1")
    print(f"\nrig3: {report}")


def round_trip(
    state: Path, tmp_path: Path, rig: str, episodes: int, codec: str = "h264"
) -> dict[str, Any]:
    """Curate a rig's episodes, export them, and compare with the source in lerobot."""
    manifest = curate(state, f"SELECT * FROM episodes WHERE robot_id = 'quarry_{rig}'", episodes)
    assert manifest["rows"] == episodes
    out = tmp_path / f"{rig}-export"
    code, result, err = quarry(
        state,
        "export",
        "lerobot",
        "--manifest",
        manifest["manifest_id"],
        str(out),
        "--codec",
        codec,
    )
    assert code == 0, err
    assert result["episodes"] == episodes
    record = read_back(out, FIXTURES / rig)
    assert record["quarry"]["manifest_id"] == manifest["manifest_id"]
    assert record["quarry"]["snapshot_id"] is not None and record["quarry"]["cdc_position"]
    assert record["episodes"] == record["source_episodes"] == episodes
    compared = record["compared"]
    assert sorted(c["source_episode"] for c in compared) == list(range(episodes))
    for row in compared:
        assert row["states_equal"] and row["actions_equal"] and row["task_equal"], row
        assert row["length"] == row["source_length"], row
    worst = min(db for row in compared for db in row["min_psnr_db"].values())
    assert worst >= MIN_PSNR_DB, compared
    return {"codec": codec, "frames": record["frames"], "min_psnr_db": round(worst, 2)}


def test_instruction_is_curatable(state: Path) -> None:
    code, _, _ = quarry(state, "ingest", "lerobot", str(FIXTURES / "rig2"))
    assert code == 0
    sql = (
        "SELECT e.* FROM episodes AS e JOIN episode_instructions AS i ON i.episode_id = e.id "
        "WHERE i.instruction = 'pick up the red cube'"
    )
    assert curate(state, sql, 2)["rows"] == 2


def test_mixed_rigs_need_a_common_camera_set(state: Path, peer_venv: None, tmp_path: Path) -> None:
    # Seed 1's first two episodes are koi-03's (3 cameras) and heron-01's (2 cameras).
    synth = ("ingest", "synth", "--episodes", "2", "--seed", "1", "--workers", "1")
    assert run_json(state, *synth)["episodes"] == 2
    manifest = curate(state, "SELECT * FROM episodes WHERE robot_id NOT LIKE 'quarry_%'", 2)
    args = ("export", "lerobot", "--manifest", manifest["manifest_id"])
    code, _, err = quarry(state, *args, str(tmp_path / "mixed"))
    assert code == 2 and "mixes camera sets [front, side, wrist] and [front, wrist]" in err
    assert not (tmp_path / "mixed" / "meta").exists()
    code, _, err = quarry(state, *args, str(tmp_path / "bad"), "--cameras", "front,side")
    assert code == 2 and "--cameras front,side" in err
    code, result, err = quarry(
        state, *args, str(tmp_path / "common"), "--cameras", "front,wrist", "--fps", "10"
    )
    assert code == 0, err
    code, _, err = quarry(state, *args, str(tmp_path / "common"), "--cameras", "front")
    assert code == 2 and "not an empty folder" in err
    record = read_back(tmp_path / "common")
    assert record["episodes"] == 2 and record["fps"] == 10
    assert record["cameras"] == ["observation.images.front", "observation.images.wrist"]
    assert record["state_dim"] == 13 and sum(record["lengths"]) == result["frames"]
