"""``quarry ingest mcap`` and ``quarry episodes inspect``: the real console script, a real stack.

Ingested recordings reach the warehouse through CDC like synthetic ones: a curation finds them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from episodes.survey import survey
from quarry.commands._recording import write_mapping
from quarry.errors import BadInputError
from quarry.settings import Settings
from quarry.stack.postgres import OPERATIONAL_DB, EmbeddedPostgres
from tests.episodes.foreign_files import (
    FOXGLOVE_MAPPING_TOML,
    ROS2_MAPPING,
    SALVAGE_CONFIG,
    source_episode,
    write_foxglove,
    write_ros2,
    write_ros2_without_actions,
)
from tests.fixtures.postgres import private_folder
from tests.fixtures.stack import run_json, run_quarry


@pytest.fixture(scope="module")
def state() -> Iterator[Path]:
    with private_folder("quarry-test-cli-") as folder:
        state = folder / "state"
        try:
            assert run_json(state, "up")["healthy"]
            yield state
        finally:
            run_quarry(state, "down", check=False)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("recordings")
    source = source_episode(seed=8)
    (folder / "ros2").mkdir()
    ros2 = write_ros2(folder / "ros2" / "bag_0.mcap", source)
    fox = write_foxglove(folder / "fox.mcap", source)
    cut = folder / "cut.mcap"
    cut.write_bytes(ros2.read_bytes()[:4000])
    (folder / "ros2.json").write_text(json.dumps(ROS2_MAPPING))
    (folder / "fox.toml").write_text(FOXGLOVE_MAPPING_TOML)
    salvage_source = source_episode(seed=9, config=SALVAGE_CONFIG)
    bare = write_ros2_without_actions(folder / "bare.mcap", salvage_source)
    bare_cut = folder / "bare-cut.mcap"
    bare_cut.write_bytes(bare.read_bytes()[:-2048])
    return {
        "ros2": ros2,
        "fox": fox,
        "cut": cut,
        "folder": folder,
        "bare": bare,
        "bare_cut": bare_cut,
    }


def ingest(state: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_quarry(state, "ingest", "mcap", *args, "--json", check=False)
    return done.returncode, json.loads(done.stdout), done.stderr


def test_ingest_mcap(state: Path, recordings: dict[str, Path]) -> None:
    folder = recordings["folder"]
    code, out, err = ingest(
        state, str(folder / "ros2"), str(recordings["cut"]), "--mapping", str(folder / "ros2.json")
    )
    assert code == 2 and (out["registered"], out["failed"]) == (1, 1)
    (error,) = out["errors"]
    assert error["error"] == "ContainerError" and error["file"] == str(recordings["cut"])
    assert error["offset"] is not None and f"offset={error['offset']}" in err
    assert out["results"][0]["flags"] == ["dropped_frames"]

    code, out, _ = ingest(
        state,
        str(recordings["fox"]),
        str(recordings["ros2"]),
        "--mapping",
        str(folder / "fox.toml"),
        "--robot",
        "fox-arm-07",
        "--robot-sw-version",
        "9.9.9",
    )
    assert code == 0 and [r["created"] for r in out["results"]] == [True, False]
    dsn = EmbeddedPostgres(Settings(state_dir=state).paths).dsn(OPERATIONAL_DB)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT robot_id, robot_sw_version, pipeline_version, uri FROM episodes ORDER BY 1"
        ).fetchall()
    assert [r[:3] for r in rows] == [("fox-arm-07", "9.9.9", 7), ("ros-arm-01", "humble-4.2", 1)]
    assert all(Path(r[3].removeprefix("file://")).is_file() for r in rows)
    assert curated_rows(state, "SELECT * FROM episodes WHERE robot_id = 'fox-arm-07'") == 1


def curated_rows(state: Path, sql: str, want: int = 1, timeout_s: float = 60.0) -> int:
    """Rows of a curation, polled until CDC has carried ``want`` episodes to the warehouse."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = int(run_json(state, "curate", "--sql", sql)["rows"])
        if rows >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def test_ingest_mcap_refuses_a_bad_mapping(state: Path, recordings: dict[str, Path]) -> None:
    bad = recordings["folder"] / "bad.toml"
    bad.write_text('robot = "r"\nwindow = 2\n')
    done = run_quarry(
        state, "ingest", "mcap", str(recordings["fox"]), "--mapping", str(bad), check=False
    )
    assert done.returncode == 2 and "unknown keys" in done.stderr and str(bad) in done.stderr


def test_episodes_inspect(state: Path, recordings: dict[str, Path]) -> None:
    folder = recordings["folder"]
    _, out, _ = ingest(state, str(recordings["ros2"]), "--mapping", str(folder / "ros2.json"))
    uri = out["results"][0]["uri"]
    info = run_json(state, "episodes", "inspect", uri)
    assert info["stamps"]["robot_sw_version"] == "humble-4.2"
    assert {t["group"] for t in info["topics"]} == {"cameras", "state"}
    rates = {t["topic"]: t["rate_hz"] for t in info["topics"]}
    assert rates["/front/image_raw/compressed"] == 30.0 and rates["/state/joint_positions"] == 100.0
    episode, layout = info["episode"], info["layout"]
    windows = -(-(episode["end_ns"] - episode["start_ns"]) // layout["window_ns"])
    assert len(info["chunks"]) == windows * len(info["groups"]) and layout["name"] == "grouped"
    assert info["quality"]["flags"] == ["dropped_frames"]
    text = run_quarry(state, "episodes", "inspect", uri).stdout
    assert "qc flags  dropped_frames" in text and "/wrist/image_raw" in text
    bad = run_quarry(state, "episodes", "inspect", str(recordings["cut"]), check=False)
    assert bad.returncode == 2 and str(recordings["cut"]) in bad.stderr and "offset=" in bad.stderr


def test_inspect_a_foreign_recording_and_ingest_its_suggested_mapping(
    state: Path, recordings: dict[str, Path]
) -> None:
    bare, suggested = recordings["bare"], recordings["folder"] / "suggested.toml"
    info = run_json(state, "episodes", "inspect", str(bare), "--suggest-mapping", str(suggested))
    assert info["format"] == "foreign" and info["indexed"]["indexed"] and info["damage"] is None
    assert {t["schema"] for t in info["topics"]} == {
        "sensor_msgs/msg/CompressedImage",
        "sensor_msgs/msg/JointState",
    }
    text = run_quarry(state, "episodes", "inspect", str(bare)).stdout
    assert "profile:     ros2" in text and "zstd: [" in text and "/joint_states" in text
    assert "derives actions" in suggested.read_text()
    code, out, _ = ingest(state, str(bare), "--mapping", str(suggested), "--robot", "ros-arm-03")
    assert code == 0 and out["registered"] == 1
    assert "actions_derived" in out["results"][0]["flags"]
    assert curated_rows(state, "SELECT * FROM episodes WHERE robot_id = 'ros-arm-03'") == 1
    robot: dict[str, Any] = {"robots": ["ros-arm-03"]}
    for filters, want in ((robot, 1), ({**robot, "exclude_flags": ["actions_derived"]}, 0)):
        seen = run_json(state, "curate", "--filters", json.dumps(filters), "--preview")
        assert seen["totals"]["episodes"] == want
    refused = run_quarry(
        state,
        "episodes",
        "inspect",
        out["results"][0]["uri"],
        "--suggest-mapping",
        "x.toml",
        check=False,
    )
    assert refused.returncode == 2 and "needs no mapping" in refused.stderr


def test_ingest_mcap_salvage(state: Path, recordings: dict[str, Path]) -> None:
    cut = recordings["bare_cut"]
    who = ("--robot", "ros-arm-04", "--task", "wipe")
    refused = run_quarry(state, "ingest", "mcap", str(cut), *who, check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--salvage" in refused.stderr and "offset=" in refused.stderr
    dsn = EmbeddedPostgres(Settings(state_dir=state).paths).dsn(OPERATIONAL_DB)
    with psycopg.connect(dsn) as conn:
        none = conn.execute("SELECT count(*) FROM episodes WHERE robot_id = 'ros-arm-04'")
        assert none.fetchone() == (0,)  # nothing half-registered
    looked = run_quarry(state, "episodes", "inspect", str(cut), "--json", check=False)
    damage = json.loads(looked.stdout)["damage"]
    assert looked.returncode == 2 and f"offset={damage['offset']}" in looked.stderr
    code, out, _ = ingest(state, str(cut), *who, "--salvage")
    assert code == 0 and "truncated" in out["results"][0]["flags"]
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT qc_report FROM episodes WHERE id = %s", (out["results"][0]["episode_id"],)
        ).fetchone()
    assert row is not None and row[0]["salvage"]["offset"] == damage["offset"]


def test_help_and_bad_input_of_the_new_options(
    state: Path, recordings: dict[str, Path], tmp_path: Path
) -> None:
    assert "--salvage" in run_quarry(state, "ingest", "mcap", "--help").stdout
    assert "--suggest-mapping" in run_quarry(state, "episodes", "inspect", "--help").stdout
    not_mcap = recordings["folder"] / "ros2.json"
    done = run_quarry(state, "episodes", "inspect", str(not_mcap), check=False)
    assert done.returncode == 2 and "not an MCAP file" in done.stderr
    assert str(not_mcap) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    with pytest.raises(BadInputError, match="cannot write the mapping"):
        write_mapping(survey(recordings["bare"]), tmp_path / "no-such-folder" / "m.toml")
