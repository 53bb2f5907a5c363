"""What the hosts of the multi-host test run (``python -m tests.deploy.multihost_roles ROLE
JSON``), each on its own host; every result is one JSON line on stdout.

``postgres``: the embedded server's binaries and data folder, listening on the host's address
with password logins from the test's subnet (the catalog reader's trust rule as on the socket),
migrated, with an admin token. ``fleet``: synthetic episodes written to S3 and registered in
Postgres, as a fleet's uploader would. ``curate``: a curation POSTed to the service.
``served``: what a replica serves of a manifest (registry entry, Arrow file, card) beside the
bucket's object. ``submit``/``job``: a curation job queued on one replica, read on another.
``objects``: the keys under a bucket's prefix. ``train``: one node's torchrun agent
(``launch_run``). ``stale``: a bucket, and small synthetic episodes of an older pipeline
version registered, for the pipeline to reprocess.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

# Each role imports what it needs when it runs: importing torch for every role (the trainer
# does) cost seconds per call on the shared two cores.
SQL_DIR = Path(__file__).resolve().parents[2] / "sql" / "postgres"


def postgres(state: str, address: str, subnet: str) -> dict[str, Any]:
    from quarry.stack.migrations import apply_migrations
    from quarry.stack.paths import StatePaths
    from quarry.stack.postgres import CATALOG_DB, OPERATIONAL_DB, READER_ROLE, EmbeddedPostgres
    from service.tokens import ensure_admin_token

    server = EmbeddedPostgres(StatePaths.at(state))
    server.init()
    with (server.paths.pgdata / "postgresql.conf").open("a") as conf:
        conf.write(f"listen_addresses = '{address}'\n")  # the last setting wins
    server.start()
    for database in (OPERATIONAL_DB, CATALOG_DB):
        server.ensure_database(database)
    server.ensure_reader_role(CATALOG_DB)
    with (server.paths.pgdata / "pg_hba.conf").open("a") as hba:
        hba.write(
            f"host {CATALOG_DB} {READER_ROLE} {subnet} trust\n"
            f"host all all {subnet} scram-sha-256\n"
            f"host replication all {subnet} scram-sha-256\n"
        )
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    apply_migrations(server.dsn(OPERATIONAL_DB), SQL_DIR)
    with psycopg.connect(server.dsn(OPERATIONAL_DB), autocommit=True) as conn:
        ensure_admin_token(conn, server.paths.admin_token)
    return {"password": server.password_file.read_text().strip()}


def fleet(dsn: str, s3: dict[str, str], buckets: list[str], episodes: int) -> dict[str, Any]:
    import boto3  # type: ignore[import-untyped]

    from episodes.ingest import prepare_bytes, register
    from episodes.synth import FleetConfig, synth_episode
    from episodes.writer import WriteOptions, write_episode

    config = FleetConfig(
        width=64, height=48, cameras=(("front", 10.0),), duration_s=(4.0, 5.0), fault_rate=0.0
    )
    client = boto3.client("s3", region_name="us-east-1", **s3)
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)
    created = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for index in range(episodes):
            episode = synth_episode(7, index, config)
            buffer = io.BytesIO()
            write_episode(episode, buffer, WriteOptions())
            key = f"episodes/{episode.robot_id}/{episode.episode_id}.mcap"
            client.put_object(Bucket=buckets[0], Key=key, Body=buffer.getvalue())
            prepared = prepare_bytes(buffer.getvalue(), f"s3://{buckets[0]}/{key}")
            created.append(register(conn, prepared).episode_id)
    return {"episodes": created}


def stale(
    dsn: str, s3: dict[str, str], bucket: str, objects: str, episodes: int, version: int
) -> dict[str, Any]:
    import boto3  # type: ignore[import-untyped]

    from episodes.ingest import ingest_synth
    from episodes.synth import FleetConfig

    boto3.client("s3", region_name="us-east-1", **s3).create_bucket(Bucket=bucket)
    config = FleetConfig(width=64, height=48, duration_s=(3.0, 3.5))
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = ingest_synth(
            conn, Path(objects), episodes, seed=5, config=config, workers=1,
            pipeline_version=version,
        )  # fmt: skip
    return {"episodes": [r.episode_id for r in done]}


def curate(url: str, token: str, sql: str, rows: int, timeout_s: float) -> dict[str, Any]:
    """POST the curation until it holds ``rows`` rows (the follower may still be catching up)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {token}"}
    while True:
        response = httpx.post(f"{url}/v1/curations", json={"sql": sql}, headers=headers)
        body: dict[str, Any] = response.json()
        if response.status_code == 201 and body["rows"] == rows:
            return body
        if time.monotonic() > deadline:
            raise SystemExit(f"no curation of {rows} rows: {response.status_code} {body}")
        time.sleep(0.5)


def served(
    url: str, token: str, manifest_id: str, s3: dict[str, str], bucket: str
) -> dict[str, Any]:
    """The registry entry, the Arrow file's hash, the card and the bucket object's hash."""
    import hashlib

    import boto3  # type: ignore[import-untyped]

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
        shown = api.get(f"/v1/manifests/{manifest_id}")
        arrow = api.get(f"/v1/manifests/{manifest_id}/arrow")
        card = api.get(f"/v1/manifests/{manifest_id}/card")
    client = boto3.client("s3", region_name="us-east-1", **s3)
    stored = client.get_object(Bucket=bucket, Key=f"manifests/{manifest_id}.arrow")["Body"].read()
    return {
        "show": [shown.status_code, shown.json()],
        "arrow": [arrow.status_code, hashlib.sha256(arrow.content).hexdigest()],
        "etag": arrow.headers.get("etag"),
        "card": [card.status_code, card.json()],
        "stored": hashlib.sha256(stored).hexdigest(),
    }


def submit(url: str, status_url: str, token: str, sql: str) -> dict[str, Any]:
    """Queue ``sql`` as a job on ``url``; return it once ``status_url`` reads it running."""
    headers = {"Authorization": f"Bearer {token}"}
    queued = httpx.post(
        f"{url}/v1/curations", params={"async": "true"}, json={"sql": sql}, headers=headers
    )
    if queued.status_code != 202:
        raise SystemExit(f"not queued: {queued.status_code} {queued.text}")
    return job(status_url, token, queued.json()["id"], ["running"], 60)


def job(url: str, token: str, job_id: str, statuses: list[str], timeout_s: float) -> dict[str, Any]:
    """The job as ``url`` reads it, once its status is one of ``statuses``."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {token}"}
    while True:
        read: dict[str, Any] = httpx.get(
            f"{url}/v1/curations/jobs/{job_id}", headers=headers, timeout=30
        ).json()
        if read["status"] in statuses:
            return read
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id} not {statuses} in {timeout_s} s: {read}")
        time.sleep(0.2)


def objects(s3: dict[str, str], bucket: str, prefix: str) -> dict[str, Any]:
    import boto3  # type: ignore[import-untyped]

    client = boto3.client("s3", region_name="us-east-1", **s3)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {"keys": sorted(item["Key"] for item in listed.get("Contents", []))}


def train(settings: dict[str, Any]) -> dict[str, Any]:
    from trainer.config import load_config
    from trainer.launch import launch_run

    result = launch_run(load_config(values=settings), python=sys.executable)
    return {"exit_code": result.exit_code, "summary": result.summary}


ROLES: dict[str, Callable[..., dict[str, Any]]] = {
    "postgres": postgres,
    "fleet": fleet,
    "curate": curate,
    "stale": stale,
    "served": served,
    "submit": submit,
    "job": job,
    "objects": objects,
    "train": train,
}

if __name__ == "__main__":
    role, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(ROLES[role](**arguments)), flush=True)
