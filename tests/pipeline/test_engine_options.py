"""A worker's connections to DBOS's tables: no ping per checkout, and commits that do not
wait for the WAL flush unless ``pipeline.synchronous_step_records`` (real Postgres)."""

from __future__ import annotations

import sqlalchemy as sa

from pipeline.config import PipelineConfig
from pipeline.engine import engine_options, system_url


def _setting(dsn: str, synchronous: bool, name: str) -> str:
    engine = sa.create_engine(system_url(dsn), **engine_options(dsn, synchronous))
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text(f"SHOW {name}")).scalar_one())
    finally:
        engine.dispose()


def test_step_records_commit_without_waiting_for_the_flush_by_default(pg_dsn: str) -> None:
    assert PipelineConfig().synchronous_step_records is False
    assert _setting(pg_dsn, False, "synchronous_commit") == "off"
    assert _setting(pg_dsn, False, "application_name") == "quarry-worker"
    assert engine_options(pg_dsn, False)["pool_pre_ping"] is False


def test_synchronous_step_records_keep_the_servers_setting(pg_dsn: str) -> None:
    assert _setting(pg_dsn, True, "synchronous_commit") == "on"


def test_options_of_the_dsn_are_kept(pg_dsn: str) -> None:
    dsn = f"{pg_dsn} options='-c statement_timeout=12345'"
    assert _setting(dsn, False, "statement_timeout") == "12345ms"
    assert _setting(dsn, False, "synchronous_commit") == "off"
