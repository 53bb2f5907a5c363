"""An operational database of the release before container versions upgrades in place
(migration 0008 lists each episode's container as version 1, at its old path); a reprocess
of an episode with no recorded source is refused before the run starts; ``quarry episodes
gc`` deletes the superseded versions no manifest lists and keeps the one a manifest lists."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

from curation.lineage import lineage_rows
from curation.registration import CurationResult, ManifestAnnotation, register_manifest
from episodes.ingest import prepare_bytes, store_episode
from episodes.registry import _EPISODE, _ROBOT, _TASK, episode_params, insert_flags_and_stats
from episodes.synth import synth_episode
from episodes.versions import register_version, versions_of
from episodes.writer import WriteOptions, write_episode
from manifests.build import build_manifest
from manifests.meta import ManifestMeta
from quarry.stack.migrations import apply_migrations
from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.postgres import SQL_DIR
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

from .conftest import TINY, Stack


def previous_release(folder: Path) -> Path:
    """The migrations before container versions."""
    folder.mkdir()
    for path in sorted(SQL_DIR.glob("*.sql")):
        if int(path.name[:4]) < 8:
            shutil.copy(path, folder / path.name)
    return folder


def old_episode(conn: psycopg.Connection[Any], objects: Path, pipeline_version: int) -> str:
    """Register an episode as the previous release did: ``<robot>/<id>.mcap``, no version."""
    episode = synth_episode(5, 0, TINY)
    episode.stamps = dataclasses.replace(episode.stamps, pipeline_version=pipeline_version)
    buffer = io.BytesIO()
    write_episode(episode, buffer, WriteOptions())
    path = objects.resolve() / "episodes" / episode.robot_id / f"{episode.episode_id}.mcap"
    path.parent.mkdir(parents=True)
    path.write_bytes(buffer.getvalue())
    prepared = prepare_bytes(buffer.getvalue(), "file://" + str(path))
    rec = prepared.record
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(_ROBOT, (rec.robot_id, rec.robot_model, rec.site))
        cur.execute(_TASK, (rec.task_id, rec.task_description))
        cur.execute(_EPISODE, episode_params(rec, prepared.quality))
        insert_flags_and_stats(cur, rec.episode_id, prepared.quality, prepared.stats)
    return rec.episode_id


def new_version(conn: psycopg.Connection[Any], objects: Path, pipeline_version: int) -> str:
    episode = synth_episode(5, 0, TINY)
    episode.stamps = dataclasses.replace(episode.stamps, pipeline_version=pipeline_version)
    prepared = store_episode(episode, objects, WriteOptions())
    assert register_version(conn, prepared.record, prepared.quality, prepared.stats)
    return prepared.record.uri


def manifest_listing(
    conn: psycopg.Connection[Any],
    warehouse: DuckLakeWarehouse,
    folder: Path,
    episode_id: str,
    uri: str,
) -> str:
    table = pa.table(
        {
            "episode_id": [episode_id],
            "uri": [uri],
            "start_ns": pa.array([0], pa.int64()),
            "end_ns": pa.array([10**9], pa.int64()),
            "num_samples": pa.array([1], pa.int64()),
            "size_bytes": pa.array([1], pa.int64()),
            "sha256": ["00" * 32],
        }
    )
    meta = ManifestMeta(sql="SELECT * FROM episodes")
    info = build_manifest(table, meta, folder)
    result = CurationResult(info.manifest_id, 1, 1, info.size_bytes, 1, False, info.path)
    register_manifest(
        conn,
        warehouse.append_lineage,
        result,
        meta,
        "key",
        "me",
        ManifestAnnotation(),
        lineage_rows(table),
    )
    return info.manifest_id


def test_old_database_upgrades_and_gc_keeps_listed_versions(
    postgres: EmbeddedPostgres,
    stack: Stack,
    tmp_path: Path,
    warehouse: DuckLakeWarehouse,
    warehouse_config: DuckLakeConfig,
) -> None:
    postgres.ensure_database("upgrade_0")
    dsn = postgres.dsn("upgrade_0")
    apply_migrations(dsn, previous_release(tmp_path / "old-sql"))
    stack.env["QUARRY_SOURCE_DSN"] = dsn
    # gc reads the lineage (which manifests hold an episode) from the warehouse
    assert warehouse_config.catalog_dsn is not None and warehouse_config.data_path is not None
    stack.env["QUARRY_WAREHOUSE__CATALOG_DSN"] = warehouse_config.catalog_dsn.get_secret_value()
    stack.env["QUARRY_WAREHOUSE__DATA_PATH"] = str(warehouse_config.data_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        eid = old_episode(conn, stack.objects, pipeline_version=1)
        old_uri = conn.execute("SELECT uri FROM episodes").fetchone()[0]  # type: ignore[index]
        assert apply_migrations(dsn, SQL_DIR) == [8, 9, 10]
        (v1,) = versions_of(conn, eid)
        assert (v1.version, v1.uri, v1.current, v1.pipeline_version) == (1, old_uri, True, 1)

        refused = stack.quarry("pipeline", "run", "--profile", "reprocess", "--episode", eid)
        assert refused.returncode == 2, refused.stderr
        assert "no recorded source" in refused.stderr and eid in refused.stderr

        listed = manifest_listing(conn, warehouse, stack.root / "manifests", eid, old_uri)
        v2_uri = new_version(conn, stack.objects, pipeline_version=2)
        v3_uri = new_version(conn, stack.objects, pipeline_version=3)
        assert [v.current for v in versions_of(conn, eid)] == [False, False, True]

        done = stack.quarry("episodes", "gc", "--grace", "0", "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [(d["version"], d["uri"]) for d in report["deleted"]] == [(2, v2_uri)]
        assert [(k["version"], k["manifest_id"]) for k in report["kept"]] == [(1, listed)]
        assert [v.version for v in versions_of(conn, eid)] == [1, 3]
        assert Path(old_uri.removeprefix("file://")).is_file()
        assert not Path(v2_uri.removeprefix("file://")).exists()
        assert Path(v3_uri.removeprefix("file://")).is_file()
        row = conn.execute("SELECT uri, pipeline_version FROM episodes").fetchone()
        assert row == (v3_uri, 3)
