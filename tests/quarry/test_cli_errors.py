"""No traceback without ``--debug``: every expected error is one line and a documented exit
code; an unexpected one exits 70 and names the log file holding its traceback. Run through the
real console script (and ``python -m quarry``), against a real stack whose service is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from manifests import ManifestMeta, build_manifest
from quarry.exits import EXIT_CODES, UNAVAILABLE, explain
from tests.fixtures.stack import QUARRY, run_json, run_quarry
from trainer.errors import ConfigError as TrainerConfigError
from warehouse.errors import SchemaError, WarehouseUnavailableError

MISSING_ID = "ab" * 32


def quarry_with(
    env: dict[str, str], state: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``quarry <args> --state-dir state`` with ``env`` as its only QUARRY_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    return subprocess.run(
        [QUARRY, *args, "--state-dir", str(state)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The process exited ``code`` with one ``error:`` line holding ``words``, no traceback."""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def empty_manifest(state: Path) -> str:
    """A manifest with no rows in ``<state>/manifests``, as a curation of nothing builds."""
    columns = ("episode_id", "uri", "start_ns", "end_ns", "num_samples", "size_bytes", "sha256")
    types = (pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.string())
    table = pa.table({c: pa.array([], type=t) for c, t in zip(columns, types, strict=True)})
    return build_manifest(table, ManifestMeta(sql="SELECT 1"), state / "manifests").manifest_id


def test_a_killed_service_is_one_line_and_exit_3(state: Path) -> None:
    try:
        up = run_json(state, "up")
        os.kill(up["parts"]["service"]["pid"], signal.SIGKILL)
        url = up["service_url"]
        for args in (
            ("manifests", "list"),
            ("curate", "--sql", "SELECT id FROM episodes"),
            ("curate", "--preview", "--sql", "SELECT id FROM episodes"),
            ("episodes", "list"),
            ("labels", "list", MISSING_ID[:8] + "-0000-0000-0000-000000000000"),
            ("sql", "SELECT 1"),
            ("stats",),
        ):
            done = run_quarry(state, *args, check=False)
            assert_one_line(done, UNAVAILABLE, f"cannot reach the service at {url}", "quarry up")
        for args in (
            ("cache", "warm", "--manifest", MISSING_ID),
            ("train", "--manifest", MISSING_ID),
        ):
            done = run_quarry(state, *args, check=False)
            assert_one_line(done, UNAVAILABLE, "cannot reach the service", "quarry up")
    finally:
        run_quarry(state, "down", check=False)


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("optim.lrr=1", "optim.lrr: Extra inputs are not permitted"),
        ("optim.lr=abc", "optim.lr: Input should be a valid number"),
        ("foo", "override must be key.path=value, got 'foo'"),
    ],
)
def test_a_bad_trainer_setting_is_one_line_and_exit_2(
    state: Path, override: str, says: str
) -> None:
    manifest_id = empty_manifest(state)
    done = run_quarry(state, "train", "--manifest", manifest_id, "--set", override, check=False)
    assert_one_line(done, 2, says, "fix the --set/--config value")
    assert not (state / "runs").exists()  # refused before anything started


def test_training_on_an_empty_manifest_fails_once_with_the_preflights_message(
    state: Path,
) -> None:
    manifest_id = empty_manifest(state)
    done = run_quarry(state, "train", "--manifest", manifest_id, "--steps", "5", check=False)
    assert done.returncode == 70  # trainer.errors.ExitCode.PREFLIGHT_MANIFEST
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "ChildFailedError" not in output
    assert output.count('"event": "train_failed"') <= 2  # one attempt of two ranks, no restart
    last = done.stdout.strip().splitlines()[-1]
    assert "failed at once (not retryable) with exit status 70: manifest holds no samples" in last


def test_bad_settings_are_one_line_naming_the_variable(state: Path) -> None:
    done = quarry_with({"QUARRY_SERVICE__PORT": "abc"}, state, "status")
    assert_one_line(done, 2, "service.port", "QUARRY_SERVICE__PORT")
    done = quarry_with({"QUARRY_WAREHOUSE__BACKEND": "nope"}, state, "cdc", "follow")
    assert_one_line(done, 2, "'nope'", "QUARRY_WAREHOUSE")
    done = quarry_with({"QUARRY_WAREHOUSE__BACKEND": "clickhouse"}, state, "cdc", "follow")
    assert_one_line(done, 2, "QUARRY_WAREHOUSE__DSN")


@pytest.mark.parametrize("where", ["after", "before"])
def test_debug_works_in_any_position(tmp_path: Path, where: str) -> None:
    args = ["curate", "--sql", "SELECT 1"]
    args = [*args, "--debug"] if where == "after" else ["curate", "--debug", *args[1:]]
    done = run_quarry(tmp_path / "none", *args, check=False)
    assert done.returncode != 0
    assert "Traceback (most recent call last)" in done.stderr
    assert "quarry.errors.StackError: the service URL is not there" in done.stderr


BOOM = """
import click
from quarry import cli
from quarry.commands._common import STATE_DIR, build_settings

@cli.cli.command()
@STATE_DIR
def boom(state_dir):
    build_settings(state_dir)
    raise RuntimeError("a bug\\nover two lines")

cli.main()
"""


def boom(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A command with a bug, behind the real boundary (``quarry/cli.py`` ``main``)."""
    return subprocess.run(
        [sys.executable, "-c", BOOM, "boom", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unexpected_error_exits_70_and_names_its_log(state: Path) -> None:
    state.mkdir(parents=True)
    done = boom(state)
    log = state / "logs" / "cli-errors.log"
    line = assert_one_line(done, 70, "unexpected RuntimeError: a bug over two lines", str(log))
    assert "--debug" in line
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: a bug" in text
    assert f"quarry boom --state-dir {state}" in text
    boom(state)
    assert log.read_text().count("RuntimeError: a bug") == 2  # appended, not replaced
    debug = boom(state, "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_an_unexpected_error_without_a_state_folder_goes_to_a_temp_file(tmp_path: Path) -> None:
    done = boom(tmp_path / "never-made")
    line = assert_one_line(done, 70, "unexpected RuntimeError")
    path = Path(line.split("its traceback is in ")[1].split(" (rerun")[0])
    try:
        assert path.parent != tmp_path and "RuntimeError: a bug" in path.read_text()
    finally:
        path.unlink()
    assert not (tmp_path / "never-made").exists()  # an error creates no state folder


def test_package_errors_map_by_kind() -> None:
    unavailable = explain(WarehouseUnavailableError("catalog down"))
    assert unavailable is not None and unavailable.code == UNAVAILABLE
    assert "QUARRY_WAREHOUSE__" in unavailable.line
    refused = explain(SchemaError("no such table\nsecond line"))
    assert refused is not None and (refused.code, refused.line) == (2, "no such table second line")
    trainer = explain(TrainerConfigError("bad"))
    assert trainer is not None and trainer.code == 2
    assert explain(KeyError("x")) is None  # a bug, not an expected error


def test_help_lists_the_exit_codes() -> None:
    done = subprocess.run([QUARRY, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for code, what in EXIT_CODES:
        assert f"{code:<6} {what}" in done.stdout
    docs = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    for code, what in EXIT_CODES:
        assert f"| {code} | {what} |" in docs
