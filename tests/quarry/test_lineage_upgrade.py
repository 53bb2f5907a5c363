"""`quarry up` on a state folder from before Postgres migration 0007: the lineage rows
Postgres held reach the warehouse, and every lineage query answers as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import psycopg

from quarry.settings import SQL_ROOT
from quarry.stack.paths import StatePaths
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.lineage import add_episodes, add_legacy_lineage
from tests.fixtures.stack import QUARRY, run_json, run_quarry

MANIFEST_ID = "ef" * 32


def up_before_0007(state: Path, sql_dir: Path) -> None:
    """`quarry up` with the release's SQL less migration 0007: Postgres as it was before."""
    shutil.copytree(SQL_ROOT, sql_dir)
    (sql_dir / "postgres" / "0007_lineage_in_warehouse.sql").unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    subprocess.run(
        [QUARRY, "up", "--state-dir", str(state)],
        env={**env, "QUARRY_SQL_DIR": str(sql_dir)},
        check=True,
        capture_output=True,
        timeout=300,
    )


def test_up_carries_the_lineage_of_an_older_state_folder_over(state: Path, tmp_path: Path) -> None:
    ids = sorted(str(uuid.UUID(int=i * 101 + 7)) for i in range(40))
    try:
        up_before_0007(state, tmp_path / "sql")
        dsn = EmbeddedPostgres(StatePaths.at(state)).dsn()  # the password exists now
        with psycopg.connect(dsn, autocommit=True) as conn:
            add_episodes(conn, ids)
            add_legacy_lineage(conn, MANIFEST_ID, ids)
        run_quarry(state, "down")
        up = run_json(state, "up")
        with psycopg.connect(dsn) as conn:
            left = conn.execute(
                "SELECT to_regclass('manifest_episodes'), to_regclass('manifest_episodes_legacy')"
            ).fetchone()
            assert left == (None, None)
        page = run_json(state, "manifests", "episodes", MANIFEST_ID)
        assert [e["episode_id"] for e in page["items"]] == ids
        token = (state / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        held = httpx.get(f"{up['service_url']}/v1/episodes/{ids[3]}/manifests", headers=headers)
        assert [m["id"] for m in held.json()["manifests"]] == [MANIFEST_ID]
        shown = httpx.get(f"{up['service_url']}/v1/episodes/{ids[3]}", headers=headers)
        assert shown.json()["manifests"] == 1
    finally:
        run_quarry(state, "down", check=False)
