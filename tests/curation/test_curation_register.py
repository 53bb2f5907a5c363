"""Registering a built manifest: its lineage (every episode once, with its container's
SHA-256) in the warehouse first, its registry row last; a crash between the two (an injected
failure, a killed process) leaves lineage that no query shows and the collection deletes;
the same bytes registered again keep the first lineage; the lineage writer's own catalog
login; an upgrade carries the lineage rows Postgres held over to the warehouse."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pydantic import SecretStr

from curation.guard import CurationRefusedError, check_curation
from curation.lineage import (
    carry_over_lineage,
    collect_lineage,
    episode_ids_after,
    manifest_episodes,
    registered_holders,
)
from curation.registration import CurationResult, ManifestAnnotation, register_manifest
from curation.registry import manifests_containing
from manifests.meta import ManifestMeta
from quarry.stack.migrations import apply_migrations
from quarry.stack.postgres import LINEAGE_ROLE, EmbeddedPostgres
from tests.fixtures.clickhouse import ChdbEngine
from tests.fixtures.lineage import add_episodes, add_legacy_lineage
from tests.fixtures.postgres import SQL_DIR
from tests.fixtures.warehouse import new_warehouse_config
from warehouse.backends import open_warehouse
from warehouse.base import CURATION_VIEWS, LINEAGE_VIEW, Warehouse
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.errors import WarehouseError

MANIFEST_ID = "ab" * 32


class InjectedCrashError(Exception):
    """What the injected failure at the boundary between the two writes raises."""


def lineage_of(ids: list[str]) -> pa.Table:
    shas = [f"{i:064x}" for i in range(len(ids))]
    return pa.table({"episode_id": pa.array(ids, pa.string()), "sha256": shas})


def register(
    conn: psycopg.Connection[Any],
    lake: Warehouse,
    ids: list[str],
    manifest_id: str = MANIFEST_ID,
    *,
    crash_after_lineage: bool = False,
) -> None:
    result = CurationResult(manifest_id, len(ids), 3 * len(ids), 100, 7, False, Path("/m.arrow"))
    meta = ManifestMeta(sql="SELECT id FROM episodes", sample_spec={}, snapshot_id=7)

    def write(manifest: str, episodes: pa.Table) -> None:
        lake.append_lineage(manifest, episodes)
        if crash_after_lineage:
            raise InjectedCrashError(manifest)

    annotation = ManifestAnnotation()
    register_manifest(conn, write, result, meta, "key", "tester", annotation, lineage_of(ids))


def stored(lake: Warehouse, manifest_id: str = MANIFEST_ID) -> list[str]:
    return episode_ids_after(lake, manifest_id, None, 1_000_000)


def visible(lake: Warehouse, manifest_id: str = MANIFEST_ID) -> int:
    sql = f"SELECT count(*) AS n FROM manifest_episodes WHERE manifest_id = '{manifest_id}'"
    return int(lake.query_arrow(sql)["n"][0].as_py())


@pytest.fixture
def lake(warehouse: DuckLakeWarehouse) -> DuckLakeWarehouse:
    return warehouse


def test_the_lineage_is_every_episode_once_in_the_warehouse(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    ids = sorted(str(uuid.UUID(int=i * 7_919 + 1)) for i in range(30_000))
    register(pg_conn, lake, ids)
    assert stored(lake) == ids
    row = pg_conn.execute("SELECT rows, author FROM manifests WHERE id = %s", (MANIFEST_ID,))
    assert row.fetchone() == (30_000, "tester")
    shas = lake.query_arrow(f"SELECT sha256 FROM {LINEAGE_VIEW} ORDER BY episode_id LIMIT 2")
    assert shas["sha256"].to_pylist() == [f"{0:064x}", f"{1:064x}"]
    # Nothing in Postgres holds a row per episode any more.
    tables = pg_conn.execute("SELECT to_regclass('manifest_episodes')").fetchone()
    assert tables == (None,)


def test_a_manifest_without_episodes_registers_no_lineage(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    register(pg_conn, lake, [])
    assert stored(lake) == []
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (1,)


def test_the_same_bytes_registered_again_keep_the_first_lineage(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    first = [str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]
    register(pg_conn, lake, first)
    register(pg_conn, lake, [str(uuid.UUID(int=3))])
    assert stored(lake) == first


def test_a_crash_between_the_writes_leaves_lineage_nothing_shows_and_gc_deletes(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    ids = [str(uuid.UUID(int=i + 1)) for i in range(5)]
    add_episodes(pg_conn, ids)
    with pytest.raises(InjectedCrashError):
        register(pg_conn, lake, ids, crash_after_lineage=True)
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (0,)
    assert stored(lake) == ids  # written, under the manifest's ID, and ignored:
    assert visible(lake) == 0
    assert registered_holders(pg_conn, lake, uuid.UUID(ids[0])) == []
    assert manifests_containing(pg_conn, lake, uuid.UUID(ids[0])) == []
    assert collect_lineage(pg_conn, lake, dry_run=True) == [MANIFEST_ID]
    assert stored(lake) == ids
    assert collect_lineage(pg_conn, lake) == [MANIFEST_ID]
    assert stored(lake) == [] and lake.lineage_manifests() == set()
    # A retry after the crash, without a collection in between, writes each row once.
    with pytest.raises(InjectedCrashError):
        register(pg_conn, lake, ids, crash_after_lineage=True)
    register(pg_conn, lake, ids)
    assert stored(lake) == ids
    assert collect_lineage(pg_conn, lake) == []
    rows, cursor = manifest_episodes(
        pg_conn, lake, MANIFEST_ID, pipeline_below=None, limit=3, after=None
    )
    assert [r["episode_id"] for r in rows] == ids[:3] and cursor == ids[2]


def test_a_failed_lineage_write_registers_nothing(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    bad = pa.table({"episode_id": ["x"]})  # no sha256 column: the write fails
    result = CurationResult(MANIFEST_ID, 1, 1, 1, 7, False, Path("/m.arrow"))
    meta = ManifestMeta(sql="SELECT id FROM episodes", sample_spec={}, snapshot_id=7)
    with pytest.raises(KeyError):
        register_manifest(
            pg_conn, lake.append_lineage, result, meta, "k", "t", ManifestAnnotation(), bad
        )
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (0,)
    assert lake.lineage_manifests() == set()


def test_stale_pages_filter_by_pipeline_version_across_chunks(
    pg_conn: psycopg.Connection[Any], lake: DuckLakeWarehouse
) -> None:
    ids = sorted(str(uuid.UUID(int=i * 31 + 5)) for i in range(9_000))
    stale = set(ids[::1000])
    add_episodes(pg_conn, [i for i in ids if i in stale], pipeline=1)
    add_episodes(pg_conn, [i for i in ids if i not in stale], pipeline=2)
    register(pg_conn, lake, ids)
    seen: list[str] = []
    after = None
    while True:
        rows, cursor = manifest_episodes(
            pg_conn, lake, MANIFEST_ID, pipeline_below=2, limit=4, after=after
        )
        seen += [r["episode_id"] for r in rows]
        if cursor is None:
            break
        after = uuid.UUID(cursor)
    assert seen == sorted(stale)


def test_clickhouse_stores_and_drops_lineage_the_same(
    pg_conn: psycopg.Connection[Any], chdb: ChdbEngine
) -> None:
    config = chdb.new_config()
    house = open_warehouse(config)
    try:
        house.bootstrap()
        ids = sorted(str(uuid.UUID(int=i + 9)) for i in range(2_000))
        add_episodes(pg_conn, ids)
        with pytest.raises(InjectedCrashError):
            register(pg_conn, house, ids, crash_after_lineage=True)
        assert stored(house) == ids and visible(house) == 0
        register(pg_conn, house, ids)  # replaces the crashed try's rows
        assert stored(house) == ids
        assert registered_holders(pg_conn, house, uuid.UUID(ids[7])) == [MANIFEST_ID]
        other = "cd" * 32
        with pytest.raises(InjectedCrashError):
            register(pg_conn, house, ids[:3], other, crash_after_lineage=True)
        assert house.lineage_manifests() == {MANIFEST_ID, other}
        assert collect_lineage(pg_conn, house) == [other]
        assert house.lineage_manifests() == {MANIFEST_ID}
        # Out of episode order (a build's never is, so the writer checks before it sorts),
        # each id keeps its own SHA-256.
        shuffled = [ids[i] for i in (5, 0, 9, 2)]
        digests = [f"{i:064x}" for i in range(len(shuffled))]
        house.append_lineage(other, pa.table({"episode_id": shuffled, "sha256": digests}))
        rows = house.query_arrow(
            f"SELECT episode_id, sha256 FROM manifest_lineage WHERE manifest_id = '{other}' "
            "ORDER BY episode_id"
        )
        assert rows["episode_id"].to_pylist() == sorted(shuffled)
        assert dict(zip(*(rows[c].to_pylist() for c in ("episode_id", "sha256")), strict=True)) == (
            dict(zip(shuffled, digests, strict=True))
        )
    finally:
        house.close()
        chdb.drop(config)


def test_the_lineage_writer_has_a_login_of_its_own_that_creates_nothing(
    postgres: EmbeddedPostgres, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    config = new_warehouse_config(postgres, tmp_path)
    assert isinstance(config, DuckLakeConfig) and config.catalog_dsn is not None
    DuckLakeWarehouse(config).bootstrap()  # the catalog's tables, as `quarry up` makes them
    catalog = config.catalog_dsn.get_secret_value().split("dbname=")[1].split()[0]
    postgres.ensure_lineage_role(catalog)
    login = postgres.dsn(catalog, user=LINEAGE_ROLE)
    lake = DuckLakeWarehouse(config.model_copy(update={"lineage_catalog_dsn": SecretStr(login)}))
    try:
        register(pg_conn, lake, [str(uuid.UUID(int=1))])
        assert stored(lake) == [str(uuid.UUID(int=1))]
    finally:
        lake.close()
    with psycopg.connect(login) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (LINEAGE_ROLE,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE lineage_may_not (x int)")


@pytest.fixture
def before_0007(postgres: EmbeddedPostgres, tmp_path: Path) -> Iterator[str]:
    """A database migrated up to 0006, as the release before this one left it."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    for path in sorted(SQL_DIR.glob("*.sql")):
        if int(path.name[:4]) < 7:
            shutil.copy(path, folder / path.name)
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    postgres.ensure_database(name)
    dsn = postgres.dsn(name)
    apply_migrations(dsn, folder)
    yield dsn


def test_an_upgrade_carries_the_lineage_rows_over_with_the_same_answers(
    before_0007: str, lake: DuckLakeWarehouse
) -> None:
    ids = sorted(str(uuid.UUID(int=i * 13 + 2)) for i in range(50))
    other = "cd" * 32
    with psycopg.connect(before_0007, autocommit=True) as conn:
        add_episodes(conn, ids)
        add_legacy_lineage(conn, MANIFEST_ID, ids)
        add_legacy_lineage(conn, other, ids[:10])
        published = "SELECT tablename FROM pg_publication_tables ORDER BY 1"
        assert ("manifest_episodes",) in conn.execute(published).fetchall()
        apply_migrations(before_0007, SQL_DIR)
        assert ("manifest_episodes",) not in conn.execute(published).fetchall()
        assert carry_over_lineage(conn, lake) == 2
        assert carry_over_lineage(conn, lake) == 0  # done once
        assert conn.execute("SELECT to_regclass('manifest_episodes_legacy')").fetchone() == (None,)
        assert stored(lake) == ids and stored(lake, other) == ids[:10]
        holders = manifests_containing(conn, lake, uuid.UUID(ids[0]))
        assert sorted(h["id"] for h in holders) == sorted([MANIFEST_ID, other])
        assert registered_holders(conn, lake, uuid.UUID(ids[-1])) == [MANIFEST_ID]


def test_a_carry_over_interrupted_midway_repeats_without_duplicates(
    before_0007: str, lake: DuckLakeWarehouse
) -> None:
    ids = [str(uuid.UUID(int=i + 1)) for i in range(4)]
    with psycopg.connect(before_0007, autocommit=True) as conn:
        add_episodes(conn, ids)
        add_legacy_lineage(conn, MANIFEST_ID, ids)
        apply_migrations(before_0007, SQL_DIR)
        lake.append_lineage(MANIFEST_ID, lineage_of(ids[:2]))  # an earlier try's rows
        assert carry_over_lineage(conn, lake) == 1
        assert stored(lake) == ids


def test_an_unreachable_lineage_store_is_a_warehouse_error(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, postgres: EmbeddedPostgres
) -> None:
    config = new_warehouse_config(postgres, tmp_path)
    assert isinstance(config, DuckLakeConfig)
    gone = config.model_copy(update={"lineage_catalog_dsn": SecretStr("host=/nonexistent")})
    lake = DuckLakeWarehouse(gone)
    try:
        with pytest.raises(WarehouseError):
            register(pg_conn, lake, [str(uuid.UUID(int=1))])
    finally:
        lake.close()
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (0,)


def test_curations_read_the_lineage_view_and_never_the_raw_rows() -> None:
    views = frozenset(CURATION_VIEWS)
    check_curation("SELECT episode_id FROM manifest_episodes WHERE manifest_id = 'x'", views)
    with pytest.raises(CurationRefusedError):
        check_curation(f"SELECT * FROM {LINEAGE_VIEW}", views)


_KILLED_AFTER_LINEAGE = """
import os, signal, sys
from pathlib import Path
import psycopg, pyarrow as pa
from pydantic import SecretStr
from curation.registration import CurationResult, ManifestAnnotation, register_manifest
from manifests.meta import ManifestMeta
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse

catalog, data, dsn, manifest_id, *ids = sys.argv[1:]
lake = DuckLakeWarehouse(DuckLakeConfig(catalog_dsn=SecretStr(catalog), data_path=Path(data)))

def write(manifest, episodes):
    lake.append_lineage(manifest, episodes)
    os.kill(os.getpid(), signal.SIGKILL)  # between the two writes, the registry's still open

result = CurationResult(manifest_id, len(ids), len(ids), 1, 7, False, Path("/m.arrow"))
meta = ManifestMeta(sql="SELECT id FROM episodes", sample_spec={}, snapshot_id=7)
rows = pa.table({"episode_id": ids, "sha256": ["s"] * len(ids)})
with psycopg.connect(dsn) as conn:
    register_manifest(conn, write, result, meta, "k", "t", ManifestAnnotation(), rows)
"""


def test_a_process_killed_between_the_writes_leaves_neither_registered(
    pg_conn: psycopg.Connection[Any], pg_dsn: str, lake: DuckLakeWarehouse
) -> None:
    ids = [str(uuid.UUID(int=i + 1)) for i in range(3)]
    config = lake.config
    assert config.catalog_dsn is not None and config.data_path is not None
    args = [config.catalog_dsn.get_secret_value(), str(config.data_path), pg_dsn, MANIFEST_ID]
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_LINEAGE, *args, *ids], timeout=120, check=False
    )
    assert killed.returncode == -signal.SIGKILL
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (0,)
    assert stored(lake) == ids and visible(lake) == 0
    assert collect_lineage(pg_conn, lake) == [MANIFEST_ID]
    register(pg_conn, lake, ids)
    assert stored(lake) == ids
