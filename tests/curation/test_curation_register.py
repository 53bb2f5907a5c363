"""Registering a built manifest: its row and its lineage (every episode once), in one
transaction; the same bytes registered again keep the first lineage."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg

from curation.registration import CurationResult, ManifestAnnotation, register_manifest
from manifests.meta import ManifestMeta

MANIFEST_ID = "ab" * 32


def registered(conn: psycopg.Connection[Any], ids: list[str]) -> None:
    result = CurationResult(MANIFEST_ID, len(ids), 3 * len(ids), 100, 7, False, Path("/m.arrow"))
    meta = ManifestMeta(sql="SELECT id FROM episodes", sample_spec={}, snapshot_id=7)
    register_manifest(conn, result, meta, "key", "tester", ManifestAnnotation(), ids)


def lineage(conn: psycopg.Connection[Any], manifest_id: str = MANIFEST_ID) -> list[str]:
    rows = conn.execute(
        "SELECT episode_id::text FROM manifest_episodes WHERE manifest_id = %s ORDER BY episode_id",
        (manifest_id,),
    ).fetchall()
    return [row[0] for row in rows]


def test_the_lineage_is_every_episode_once(pg_conn: psycopg.Connection[Any]) -> None:
    ids = sorted(str(uuid.UUID(int=i * 7_919 + 1)) for i in range(30_000))
    registered(pg_conn, ids)
    assert lineage(pg_conn) == ids
    row = pg_conn.execute("SELECT rows, author FROM manifests WHERE id = %s", (MANIFEST_ID,))
    assert row.fetchone() == (30_000, "tester")


def test_a_manifest_without_episodes_registers_no_lineage(
    pg_conn: psycopg.Connection[Any],
) -> None:
    registered(pg_conn, [])
    assert lineage(pg_conn) == []
    assert pg_conn.execute("SELECT count(*) FROM manifests").fetchone() == (1,)


def test_the_same_bytes_registered_again_keep_the_first_lineage(
    pg_conn: psycopg.Connection[Any],
) -> None:
    first = [str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]
    registered(pg_conn, first)
    registered(pg_conn, [str(uuid.UUID(int=3))])
    assert lineage(pg_conn) == first


def test_lineage_rows_pay_no_foreign_key_check(pg_conn: psycopg.Connection[Any]) -> None:
    # Migration 0003: registration writes a manifest and its lineage in one transaction and
    # manifests are never deleted; the primary key alone still refuses a repeated row.
    kinds = pg_conn.execute(
        "SELECT contype FROM pg_constraint WHERE conrelid = 'manifest_episodes'::regclass"
    ).fetchall()
    assert sorted(k for (k,) in kinds) == ["p"]
