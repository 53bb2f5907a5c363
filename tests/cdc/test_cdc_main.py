"""``python -m cdc``: the settings of ``quarry cdc follow`` from the same environment variables
(the ClickHouse DSN never a flag), clear errors for what is missing, and the follower process
mirroring into ClickHouse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.__main__ import _parser, main
from cdc.config import CdcConfig
from cdc.settings import SOURCE_DSN_ENV, FollowerSettings
from cdc.status import FollowerStatus, read_status
from tests.cdc.conftest import current_lsn, insert_episodes, seed, wait_until
from warehouse.changes import parse_lsn
from warehouse.config import ENV_PREFIX, ClickHouseConfig

CLICKHOUSE_DSN_ENV = ENV_PREFIX + "DSN"


def test_clickhouse_without_the_dsn_variable_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(CLICKHOUSE_DSN_ENV, raising=False)
    monkeypatch.setenv(SOURCE_DSN_ENV, "dbname=x")
    monkeypatch.setenv(ENV_PREFIX + "BACKEND", "clickhouse")
    assert main(["follow"]) == 2
    error = capsys.readouterr().err
    assert CLICKHOUSE_DSN_ENV in error and "clickhouse" in error


def test_ducklake_without_its_lake_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(SOURCE_DSN_ENV, "dbname=x")
    monkeypatch.setenv(ENV_PREFIX + "DATA_PATH", "/tmp/lake")
    assert main(["follow"]) == 2
    assert ENV_PREFIX + "CATALOG_DSN" in capsys.readouterr().err


def test_without_a_source_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SOURCE_DSN_ENV, raising=False)
    assert main(["follow"]) == 2
    assert SOURCE_DSN_ENV in capsys.readouterr().err


def test_the_dsn_comes_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = "https://writer:s3cret@ch.example.net:8443"
    monkeypatch.setenv(ENV_PREFIX + "BACKEND", "clickhouse")
    monkeypatch.setenv(CLICKHOUSE_DSN_ENV, dsn)
    monkeypatch.setenv(ENV_PREFIX + "DATABASE", "wh")
    config = FollowerSettings().warehouse
    assert config.backend == "clickhouse" and isinstance(config, ClickHouseConfig)
    assert config.server_dsn == dsn
    assert config.database == "wh"
    assert "s3cret" not in repr(config)
    with pytest.raises(SystemExit):  # no flag takes a DSN for ClickHouse
        _parser().parse_args(["follow", "--clickhouse-dsn", dsn])


def test_the_follower_process_mirrors_into_clickhouse(
    pg_conn: psycopg.Connection[Any], pg_dsn: str, cdc_config: CdcConfig, tmp_path: Path
) -> None:
    """``python -m cdc follow --backend clickhouse`` (chDB in the child process): snapshot,
    stream, stop on SIGTERM; then another process reads the mirrored episodes."""
    seed(pg_conn, 5)
    status = tmp_path / "cdc.json"
    dsn = f"chdb://{tmp_path / 'chdb'}"
    env = {
        **os.environ,
        SOURCE_DSN_ENV: pg_dsn,
        ENV_PREFIX + "BACKEND": "clickhouse",
        CLICKHOUSE_DSN_ENV: dsn,
        "QUARRY_CDC__SLOT": cdc_config.slot,
        "QUARRY_CDC__POLL_INTERVAL_S": "0.05",
        "QUARRY_CDC__HEARTBEAT_INTERVAL_S": "1",
    }
    command = [sys.executable, "-m", "cdc", "follow", "--status", str(status)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def reached(lsn: int) -> bool:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            current = read_status(status) or FollowerStatus(slot="")
            return current.position_lsn is not None and parse_lsn(current.position_lsn) >= lsn

        wait_until(lambda: reached(current_lsn(pg_conn)), timeout_s=60, what="the snapshot")
        insert_episodes(pg_conn, 2)
        first = "SELECT id FROM episodes ORDER BY id LIMIT 1"
        pg_conn.execute(f"DELETE FROM episodes WHERE id = ({first})")
        target = current_lsn(pg_conn)
        wait_until(lambda: reached(target), timeout_s=30, what="the streamed changes")
    finally:
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors.decode()
    read = (
        "import json, sys; from pydantic import SecretStr; "
        "from warehouse.backends import open_warehouse; "
        "from warehouse.config import ClickHouseConfig; "
        "c = ClickHouseConfig(dsn=SecretStr(sys.argv[1])); "
        "w = open_warehouse(c); "
        "print(json.dumps(sorted(w.query_arrow('SELECT id FROM episodes')['id'].to_pylist())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", read, dsn], capture_output=True, check=True, timeout=60
    )
    expected = [str(r[0]) for r in pg_conn.execute("SELECT id FROM episodes ORDER BY id")]
    assert json.loads(out.stdout) == sorted(expected)
    assert len(expected) == 6
