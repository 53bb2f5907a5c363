"""``quarry up --external``: the service and the CDC follower started against a Postgres by
its DSN and S3 (moto's server on loopback) by the settings alone, no embedded Postgres; a
curation through the service lands in S3; ``down`` stops them and leaves Postgres running.
Without the settings that address every part, it refuses and starts nothing."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from quarry.stack.postgres import READER_ROLE, EmbeddedPostgres
from tests.fixtures.postgres import create_database, private_folder
from tests.fixtures.s3 import moto_s3, s3_environment
from tests.fixtures.stack import QUARRY

BUCKET = "quarry-up"
CATALOG = "up_external_catalog"
SLOT = "quarry_up_external"
PASSWORD = "up-external-reader"


def quarry(state: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QUARRY, *args, "--state-dir", str(state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def external_env(postgres: EmbeddedPostgres) -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as s3:
        ops = create_database(postgres, "up_external_ops")
        postgres.ensure_database(CATALOG)
        with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,))
            if exists.fetchone() is None:
                conn.execute(f"CREATE ROLE {READER_ROLE} LOGIN")
            conn.execute(f"ALTER ROLE {READER_ROLE} PASSWORD '{PASSWORD}'")
            conn.execute(f"GRANT CONNECT ON DATABASE {CATALOG} TO {READER_ROLE}")
        with psycopg.connect(postgres.dsn(CATALOG), autocommit=True) as conn:
            # What deploy/postgres/init.sql grants the reader on a team's Postgres.
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {READER_ROLE}")
            conn.execute(
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {READER_ROLE}"
            )
        base = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
        yield {
            **base,
            "QUARRY_SOURCE_DSN": ops,
            "QUARRY_WAREHOUSE__CATALOG_DSN": postgres.dsn(CATALOG),
            "QUARRY_WAREHOUSE__READER_CATALOG_DSN": (
                f"{postgres.dsn(CATALOG, user=READER_ROLE)} password={PASSWORD}"
            ),
            "QUARRY_WAREHOUSE__DATA_URL": f"s3://{BUCKET}/lake",
            **s3_environment("WAREHOUSE", s3),
            "QUARRY_MANIFESTS__URL": f"s3://{BUCKET}/manifests",
            **s3_environment("MANIFESTS", s3),
            "QUARRY_CDC__SLOT": SLOT,
        }
        with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (SLOT,),
            )


def test_up_external_runs_the_service_and_follower_on_postgres_and_s3(
    external_env: dict[str, str], postgres: EmbeddedPostgres
) -> None:
    with private_folder("quarry-test-up-external-") as folder:
        state = folder / "state"
        try:
            up = quarry(state, external_env, "up", "--external", "--json")
            assert up.returncode == 0, up.stdout + up.stderr
            status = json.loads(up.stdout)
            assert status["healthy"] and status["parts"]["postgres"]["external"] is True
            assert status["parts"]["cdc"]["state"] == "streaming"
            assert not (state / "pg").exists()  # no embedded Postgres
            token = (state / "admin.token").read_text().strip()
            made = httpx.post(
                f"{status['service_url']}/v1/curations",
                json={"sql": "SELECT * FROM episodes", "allow_empty": True},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            assert made.status_code == 201, made.text
            assert [p for p in state.rglob("*.arrow")] == []  # the manifest went to S3
            again = quarry(state, external_env, "status", "--json")
            assert again.returncode == 0 and json.loads(again.stdout)["healthy"], again.stdout
        finally:
            down = quarry(state, external_env, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert postgres.is_running()  # external Postgres is not the stack's to stop


def test_up_external_without_its_settings_refuses_and_starts_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    result = quarry(tmp_path / "state", env, "up", "--external")
    assert result.returncode != 0
    for name in (
        "QUARRY_SOURCE_DSN",
        "QUARRY_WAREHOUSE__CATALOG_DSN",
        "QUARRY_WAREHOUSE__READER_CATALOG_DSN",
        "QUARRY_WAREHOUSE__DATA_URL",
        "QUARRY_MANIFESTS__URL",
    ):
        assert name in result.stderr, result.stderr
    assert not (tmp_path / "state" / "pg").exists()
