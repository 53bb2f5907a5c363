"""A stack whose warehouse Debezium feeds (``QUARRY_CDC__SOURCE=debezium``), through the real
CLI: ``quarry up`` starts no follower, ``quarry status`` reports the connector, ``quarry cdc
follow`` refuses to run beside it; and ``quarry migrate`` for parts that are not embedded."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import psycopg

from quarry.settings import Settings
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.postgres import create_database
from tests.fixtures.stack import QUARRY
from tests.fixtures.warehouse import new_warehouse_config
from tests.service.test_debezium import envelope
from warehouse.config import DuckLakeConfig

DEBEZIUM = {"QUARRY_CDC__SOURCE": "debezium"}


def quarry(state: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    return subprocess.run(
        [QUARRY, *args, "--state-dir", str(state)],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_debezium_fed_stack_runs_no_follower(state: Path) -> None:
    try:
        up = quarry(state, "up", "--json", env=DEBEZIUM)
        assert up.returncode == 0, up.stdout + up.stderr
        status = json.loads(up.stdout)
        record = json.loads((state / "stack.json").read_text())
        assert "cdc" not in record and "service" in record  # no follower was started
        assert status["parts"]["cdc"]["state"] == "waiting"
        assert status["parts"]["cdc"]["source"] == "debezium"
        follow = quarry(state, "cdc", "follow", env=DEBEZIUM)
        assert follow.returncode == 2
        assert follow.stderr.strip().splitlines() == [
            "error: the warehouse is fed by Debezium (QUARRY_CDC__SOURCE=debezium): no "
            "follower runs beside it; unset it to follow with pgoutput"
        ]
        token = StatePaths.at(state).admin_token.read_text().strip()
        url = status["service_url"]
        event = envelope("c", "robots", 100, after={"id": "dbz-stack", "model": "a", "site": "x"})
        posted = httpx.post(
            f"{url}/v1/cdc/debezium",
            json=event,
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert posted.status_code == 200, posted.text
        after = quarry(state, "status", "--json", env=DEBEZIUM)
        assert after.returncode == 0, after.stdout + after.stderr
        cdc = json.loads(after.stdout)["parts"]["cdc"]
        assert cdc["state"] == "streaming" and cdc["source"] == "debezium"
        assert cdc["position_lsn"] == "0/64"
        ready = httpx.get(f"{url}/readyz", timeout=30).json()["checks"]["cdc"]
        assert ready["source"] == "debezium" and ready["ok"]
    finally:
        quarry(state, "down", env=DEBEZIUM)


def test_migrate_needs_an_operational_database(tmp_path: Path) -> None:
    result = quarry(tmp_path / "state", "migrate")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: set QUARRY_SOURCE_DSN to the operational database (`quarry up` migrates "
        "the embedded one itself)"
    )


def test_migrate_prepares_external_parts(postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    """Postgres by URL and a DuckLake catalog in it, as the compose file runs them."""
    dsn = create_database(postgres, "migrate_external")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE schema_migrations")  # forget the template's migrations
        conn.execute("DROP PUBLICATION quarry_cdc")
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    lake = new_warehouse_config(postgres, tmp_path)
    assert isinstance(lake, DuckLakeConfig) and lake.catalog_dsn is not None
    env = {
        "QUARRY_SOURCE_DSN": dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": lake.catalog_dsn.get_secret_value(),
        "QUARRY_WAREHOUSE__DATA_PATH": str(lake.data_path),
    }
    first = quarry(tmp_path / "state", "migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("migrations applied: ") and "warehouse ready" in first.stdout
    assert quarry(tmp_path / "state", "migrate", env=env).stdout.startswith(
        "migrations applied: 0;"
    )
    settings = Settings(state_dir=tmp_path / "state", warehouse=lake)
    from warehouse.ducklake.backend import DuckLakeWarehouse

    with DuckLakeWarehouse(settings.warehouse_config()) as warehouse:
        assert "episodes" in warehouse.describe_tables()
