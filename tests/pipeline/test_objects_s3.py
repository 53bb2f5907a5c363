"""With ``pipeline.objects_url`` (workers on several machines) a run lands its recordings in
S3, the workers write containers there and read them back (profile ``metadata`` fetches one
from S3); a landed recording gone from S3 fails its own workflow at ``fetch``, naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from episodes.foreign import file_sha256, recording_id
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2
from tests.fixtures.s3 import moto_s3, s3_environment

from .conftest import Stack

PREFIX = "s3://objects/quarry"


def test_landing_and_containers_in_s3(
    stack: Stack, pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    recording = write_ros2(tmp_path / "good.mcap", source_episode(seed=4))
    mapping = tmp_path / "ros2.json"
    mapping.write_text(json.dumps(ROS2_MAPPING))
    with moto_s3("objects") as client:
        stack.env |= {"QUARRY_PIPELINE__OBJECTS_URL": PREFIX, **s3_environment("PIPELINE", client)}
        stack.start_worker()
        args = ("pipeline", "run", "--profile", "full", str(recording), "--mapping", str(mapping))
        done = stack.quarry(*args, "--robot", "r7", "--wait", "--json")
        assert done.returncode == 0, done.stderr
        sha, eid = file_sha256(recording), recording_id(file_sha256(recording))
        row = pg_conn.execute(
            "SELECT s.uri, e.uri FROM episodes e JOIN episode_sources s ON s.episode_id = e.id"
            " WHERE e.id = %s",
            (eid,),
        ).fetchone()
        assert row is not None
        source, container = row
        assert source == f"{PREFIX}/landing/{sha}.mcap"
        landed = client.get_object(Bucket="objects", Key=f"quarry/landing/{sha}.mcap")
        assert landed["Body"].read() == recording.read_bytes()
        assert container.startswith(f"{PREFIX}/episodes/r7/{eid}/"), container
        key = container.removeprefix("s3://objects/")
        assert client.head_object(Bucket="objects", Key=key)["ContentLength"] > 0

        meta = stack.quarry("pipeline", "run", "--profile", "metadata", "--episode", eid, "--wait")
        assert meta.returncode == 0, meta.stderr

        client.delete_object(Bucket="objects", Key=f"quarry/landing/{sha}.mcap")
        again = stack.quarry(
            "pipeline", "run", "--profile", "reprocess", "--episode", eid, "--wait", "--json"
        )
        assert again.returncode == 2, again.stderr
        (error,) = json.loads(again.stdout)["errors"].values()
        assert (error["step"], error["error"]) == ("fetch", "SourceError"), error
        assert "object missing" in error["message"] and source in error["message"], error
        versions = pg_conn.execute(
            "SELECT count(*) FROM episode_containers WHERE episode_id = %s", (eid,)
        ).fetchone()
        assert versions == (1,)  # nothing registered by the failed run
