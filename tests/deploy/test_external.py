"""External mode with two service replicas that share only Postgres and S3 (moto's server on
loopback): the DuckLake catalog and the operational database in one Postgres, the lake's
Parquet and the manifest files in one bucket, each replica with its own state folder. A
curation POSTed to one replica is served by the other (registry entry, Arrow file by ranges,
card, rebuild, a job), and neither state folder holds a manifest. The guard's refusals hold
there as on the embedded stack, and the readers' engine reaches the lake's prefix and
nothing else: not the manifests beside it, another bucket, a local file or the catalog's
server."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import psycopg
import pytest
from pydantic import SecretStr

from curation.gc import collect_manifests
from loader.config import ManifestConfig
from loader.delivery import deliver_manifest
from manifests.objects import ObjectManifestStore
from quarry.stack.postgres import READER_ROLE, EmbeddedPostgres
from service.manifest_files import storage_options
from service.tokens import Scope, create_token
from tests.curation.test_guard import HOSTILE
from tests.fixtures.lake_rows import add_bulk_episodes
from tests.fixtures.postgres import create_database, private_folder
from tests.fixtures.s3 import moto_s3, s3_environment, s3_section
from tests.fixtures.stack import QUARRY
from tests.service.test_reader_lockdown import escapes
from warehouse.config import DuckLakeConfig
from warehouse.ducklake.backend import DuckLakeWarehouse
from warehouse.ducklake.reader import LakeReader

BUCKET = "quarry"
OTHER = "other"
CATALOG = "external_catalog"
EPISODES = 12
SPEC = {"anchor_stride": 7}
READER_PASSWORD = "external-reader-password"


@dataclass
class Replicas:
    urls: list[str]
    states: list[Path]
    token: str
    s3: Any
    ops_dsn: str
    reader_lake: DuckLakeConfig  # the lake as the replicas' readers attach it
    socket_dir: str  # the Postgres server's

    def client(self, replica: int) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.urls[replica], headers=headers, timeout=60)


# Curations that read what only external mode has: the bucket's other prefixes, other buckets.
EXTERNAL_HOSTILE = [
    (f"SELECT * FROM read_parquet('s3://{BUCKET}/manifests/*.arrow')", "table_function"),
    (f"SELECT * FROM read_csv('s3://{OTHER}/secret.csv')", "table_function"),
    (f"SELECT * FROM 's3://{BUCKET}/lake/main/episodes/x.parquet'", "relation"),
    (f"SELECT * FROM glob('s3://{BUCKET}/*')", "table_function"),
    ("SELECT * FROM duckdb_secrets()", "table_function"),
    (f"COPY episodes TO 's3://{BUCKET}/lake/x.csv'", "statement"),
]


def reader_dsn(postgres: EmbeddedPostgres) -> str:
    return f"{postgres.dsn(CATALOG, user=READER_ROLE)} password={READER_PASSWORD}"


def environment(postgres: EmbeddedPostgres, ops_dsn: str, s3: Any) -> dict[str, str]:
    """The settings of a replica, as the compose file gives them: by environment alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    return {
        **env,
        "QUARRY_SOURCE_DSN": ops_dsn,
        "QUARRY_WAREHOUSE__CATALOG_DSN": postgres.dsn(CATALOG),
        "QUARRY_WAREHOUSE__READER_CATALOG_DSN": reader_dsn(postgres),
        "QUARRY_WAREHOUSE__DATA_URL": f"s3://{BUCKET}/lake",
        **s3_environment("WAREHOUSE", s3),
        "QUARRY_MANIFESTS__URL": f"s3://{BUCKET}/manifests",
        **s3_environment("MANIFESTS", s3),
    }


def start_replica(state: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    log = (state.parent / f"{state.name}.log").open("wb")
    process = subprocess.Popen(
        [QUARRY, "serve", "--state-dir", str(state)], env=env, stdout=log, stderr=log
    )
    url_file = state / "run" / "service.url"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"replica exited: {(state.parent / f'{state.name}.log').read_text()}"
            )
        if url_file.exists():
            url = url_file.read_text().strip()
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    return process, url
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise AssertionError("replica did not start")


@pytest.fixture(scope="module")
def replicas(postgres: EmbeddedPostgres) -> Iterator[Replicas]:
    with moto_s3(BUCKET, OTHER) as s3, private_folder("quarry-test-external-") as folder:
        s3.put_object(Bucket=OTHER, Key="secret.csv", Body=b"a\n1\n")
        s3.put_object(Bucket=BUCKET, Key="outside/x.csv", Body=b"a\n1\n")
        ops_dsn = create_database(postgres, "external_ops")
        postgres.ensure_database(CATALOG)
        lake = DuckLakeConfig(
            catalog_dsn=SecretStr(postgres.dsn(CATALOG)),
            data_url=f"s3://{BUCKET}/lake",
            s3=s3_section(s3),
        )
        with DuckLakeWarehouse(lake) as warehouse:
            warehouse.bootstrap()
        add_bulk_episodes(lake, EPISODES)
        postgres.ensure_reader_role(CATALOG)
        with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
            # A shared Postgres asks the reader for a password as for anyone else.
            conn.execute(f"ALTER ROLE {READER_ROLE} PASSWORD '{READER_PASSWORD}'")
        with psycopg.connect(ops_dsn, autocommit=True) as conn:
            token = create_token(conn, "external-test", [Scope.ADMIN])
        env = environment(postgres, ops_dsn, s3)
        states = [folder / "a", folder / "b"]
        started = [start_replica(state, env) for state in states]
        try:
            reader_lake = lake.model_copy(
                update={"reader_catalog_dsn": SecretStr(reader_dsn(postgres))}
            )
            socket_dir = str(postgres.paths.socket_dir)
            urls = [url for _, url in started]
            yield Replicas(urls, states, token, s3, ops_dsn, reader_lake, socket_dir)
        finally:
            for process, _ in started:
                process.terminate()
                process.wait(30)


def manifest_keys(s3: Any) -> list[str]:
    return keys(s3, "manifests/")


def keys(s3: Any, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


def local_manifests(states: list[Path]) -> list[Path]:
    return [p for state in states for p in state.rglob("*") if p.suffix == ".arrow"]


def test_a_curation_posted_to_one_replica_is_served_by_the_other(replicas: Replicas) -> None:
    with replicas.client(0) as a, replicas.client(1) as b:
        made = a.post("/v1/curations", json={"sql": "SELECT * FROM episodes", "sample_spec": SPEC})
        assert made.status_code == 201, made.text
        manifest_id = made.json()["manifest_id"]
        key = f"manifests/{manifest_id}.arrow"
        assert manifest_keys(replicas.s3) == [key]
        stored = replicas.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

        with psycopg.connect(replicas.ops_dsn) as conn:
            uri = conn.execute("SELECT uri FROM manifests WHERE id = %s", (manifest_id,))
            assert uri.fetchone() == (f"s3://{BUCKET}/{key}",)
        shown = b.get(f"/v1/manifests/{manifest_id}")
        assert shown.status_code == 200, shown.text
        assert shown.json()["samples"] == made.json()["samples"] > 0
        whole = b.get(f"/v1/manifests/{manifest_id}/arrow")
        assert whole.status_code == 200 and whole.content == stored
        assert whole.headers["etag"] == f'"{manifest_id}"'
        part = b.get(f"/v1/manifests/{manifest_id}/arrow", headers={"Range": "bytes=8-99"})
        assert part.status_code == 206 and part.content == stored[8:100]
        assert part.headers["content-range"] == f"bytes 8-99/{len(stored)}"
        tail = b.get(f"/v1/manifests/{manifest_id}/arrow", headers={"Range": "bytes=-16"})
        assert tail.status_code == 206 and tail.content == stored[-16:]
        outside = b.get(
            f"/v1/manifests/{manifest_id}/arrow", headers={"Range": f"bytes={len(stored)}-"}
        )
        assert outside.status_code == 416
        card = b.get(f"/v1/manifests/{manifest_id}/card")
        assert card.status_code == 200, card.text
        assert card.json()["manifest_id"] == manifest_id
        rebuilt = b.post(f"/v1/manifests/{manifest_id}/rebuild")
        assert rebuilt.status_code == 200, rebuilt.text
        assert rebuilt.json()["identical"] is True

        token_file = replicas.states[0].parent / "token"
        token_file.write_text(replicas.token)
        source = ManifestConfig(id=manifest_id, service_url=replicas.urls[1], token_file=token_file)
        node = deliver_manifest(source, replicas.states[0].parent / "node", run="external")
        assert node.read_bytes() == stored  # a trainer's download from B, verified by hash

        again = b.post("/v1/curations", json={"sql": "SELECT * FROM episodes", "sample_spec": SPEC})
        assert again.status_code == 201 and again.json()["manifest_id"] == manifest_id
        assert again.json()["reused"] is True  # B sees A's object in the bucket
    assert local_manifests(replicas.states) == []


def test_a_job_queued_on_one_replica_is_read_on_the_other(replicas: Replicas) -> None:
    sql = "SELECT * FROM episodes WHERE robot_id = 'r1'"
    with replicas.client(1) as b, replicas.client(0) as a:
        queued = b.post("/v1/curations?async=true", json={"sql": sql, "sample_spec": SPEC})
        assert queued.status_code == 202, queued.text
        job_id = queued.json()["id"]
        deadline = time.monotonic() + 60
        while (job := a.get(f"/v1/curations/jobs/{job_id}").json())["status"] != "succeeded":
            assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
            time.sleep(0.2)
        manifest_id = job["result"]["manifest_id"]
        assert a.get(f"/v1/manifests/{manifest_id}/arrow").status_code == 200
    assert f"manifests/{manifest_id}.arrow" in manifest_keys(replicas.s3)
    assert local_manifests(replicas.states) == []


def test_gc_in_s3_keeps_registered_manifests_and_takes_stray_objects(replicas: Replicas) -> None:
    stray = "manifests/" + "f" * 64 + ".arrow"
    replicas.s3.put_object(Bucket=BUCKET, Key=stray, Body=b"not a manifest")
    registered = [k for k in manifest_keys(replicas.s3) if k != stray]
    with replicas.client(1) as b:
        young = b.post("/v1/manifests/gc", json={"dry_run": True})
        assert young.status_code == 200 and young.json()["deleted"] == []  # within its grace
    store = ObjectManifestStore(
        f"s3://{BUCKET}/manifests", storage_options(s3_section(replicas.s3))
    )
    with psycopg.connect(replicas.ops_dsn, autocommit=True) as conn:
        report = collect_manifests(conn, store, dry_run=False, grace_s=0)
    assert [(c.path, c.reason) for c in report.deleted] == [
        (f"s3://{BUCKET}/{stray}", "unregistered")
    ]
    assert manifest_keys(replicas.s3) == registered and registered


# (The empty query is refused by the request's schema, 422, before the guard sees it.)
@pytest.mark.parametrize(("sql", "reason"), [h for h in HOSTILE if h[0]] + EXTERNAL_HOSTILE)
def test_the_guard_refuses_hostile_curations_in_external_mode(
    replicas: Replicas, sql: str, reason: str
) -> None:
    with replicas.client(len(sql) % 2) as api:
        response = api.post("/v1/curations", json={"sql": sql, "sample_spec": SPEC})
        assert response.status_code == 400, response.text
        assert response.json()["reason"] == reason
        explored = api.post("/v1/sql", json={"sql": sql})
        assert explored.status_code == 400 and explored.json()["reason"] == reason


def engine_gaps(manifest: str) -> list[str]:
    """Raw statements the reader's engine alone does NOT stop in external mode (measured
    against moto, whose server resolves ``..`` in a key's path): DuckDB checks
    ``allowed_directories`` on the URL's text, so ``<lake>/../`` reads or writes anywhere the
    lake's S3 key may, and a reader may create S3 secrets. The guard refuses every one of
    them (below); docs/deploy.md lists the engine's gap."""
    return [
        f"SELECT * FROM read_blob('s3://{BUCKET}/lake/../{manifest}')",
        f"SELECT * FROM read_csv('s3://{BUCKET}/lake/../../{OTHER}/secret.csv')",
        f"COPY (SELECT 1 AS a) TO 's3://{BUCKET}/lake/../{manifest}' (FORMAT csv)",
        f"COPY (SELECT 1) TO 's3://{BUCKET}/lake/escape.csv'",
        "CREATE SECRET escape (TYPE s3, KEY_ID 'k', SECRET 's', SCOPE 's3://other')",
        "SELECT * FROM duckdb_secrets()",
    ]


def test_the_guard_refuses_what_the_engine_alone_lets_through(replicas: Replicas) -> None:
    manifest = f"manifests/{'0' * 64}.arrow"
    with replicas.client(1) as api:
        for sql in engine_gaps(manifest):
            for route in ("/v1/curations", "/v1/sql"):
                response = api.post(route, json={"sql": sql})
                assert response.status_code == 400, (route, sql, response.text)
                assert response.json()["reason"] in ("table_function", "statement"), sql


def test_the_readers_engine_reaches_the_lake_prefix_only(replicas: Replicas) -> None:
    """Raw statements on a reader as the replicas open it, past the guard: each must fail in
    the engine (external access off but for the lake's prefix, configuration locked, the
    catalog through its SELECT-only role)."""
    with replicas.client(0) as api:
        made = api.post(
            "/v1/curations", json={"sql": "SELECT * FROM episodes", "sample_spec": SPEC}
        )
        assert made.status_code == 201, made.text
    manifest = f"manifests/{made.json()['manifest_id']}.arrow"
    state = replicas.states[0]
    outside = [
        f"SELECT * FROM read_blob('s3://{BUCKET}/{manifest}')",
        f"SELECT * FROM read_parquet('s3://{BUCKET}/manifests/*')",
        f"SELECT * FROM read_csv('s3://{BUCKET}/outside/x.csv')",
        f"SELECT * FROM read_csv('s3://{OTHER}/secret.csv')",
        f"SELECT * FROM read_csv('s3://{BUCKET}/lake/%2e%2e/outside/x.csv')",
        f"SELECT * FROM glob('s3://{BUCKET}/*')",
        f"COPY (SELECT 1) TO 's3://{BUCKET}/manifests/{'e' * 64}.arrow'",
        f"COPY (SELECT 1) TO 's3://{OTHER}/escape.csv'",
        f"SELECT * FROM read_text('{state}/run/service.url')",
        "SET s3_endpoint = 'attacker.example:9000'",
        "SET s3_access_key_id = 'other'",
        "RESET s3_region",
        f"ATTACH '{replicas.ops_dsn}' AS ops (TYPE postgres)",
    ]
    # httpfs is loaded on purpose here (it reads the lake): LOAD is a no-op, not an escape.
    embedded = escapes(str(state), f"s3://{BUCKET}/lake", replicas.socket_dir)
    embedded.remove("LOAD httpfs")
    reader = LakeReader(replicas.reader_lake)
    try:
        accepted = []
        for sql in [*outside, *embedded]:
            try:
                with reader.cursor() as cur:
                    got = cur.execute(sql).fetchall()
            except duckdb.Error:
                continue
            accepted.append((sql, str(got)[:300]))
        assert accepted == [], "\n".join(map(str, accepted))
        count = reader.query_arrow("SELECT count(*) AS n FROM episodes")["n"][0].as_py()
        assert 0 < count <= EPISODES  # the lake itself reads
    finally:
        reader.close()
    assert keys(replicas.s3, "manifests/eeee") == []
