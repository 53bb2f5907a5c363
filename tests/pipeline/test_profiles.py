"""Profiles ``metadata`` and ``relabel`` read the episode's current container and never
re-encode it: QC, statistics and labels are computed again (labels only, for relabel) and no
container version is added; an episode whose container file is gone is refused before the
run starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from episodes.ingest import ingest_synth
from pipeline.job import PROFILES

from .conftest import TINY, Stack


def run(stack: Stack, profile: str, episode: str) -> dict[str, Any]:
    done = stack.quarry(
        "pipeline", "run", "--profile", profile, "--episode", episode, "--wait", "--json"
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_metadata_and_relabel_keep_the_container(
    stack: Stack, pg_conn: psycopg.Connection[Any]
) -> None:
    (first, second) = ingest_synth(pg_conn, stack.objects, 2, seed=9, config=TINY, workers=1)
    eid = first.episode_id
    pg_conn.execute("DELETE FROM episode_stats WHERE episode_id = %s", (eid,))
    stack.start_worker()

    report = run(stack, "metadata", eid)
    assert report["counts"] == {"SUCCESS": 1}, report
    steps = (stack.work / f"{report['run_id']}_{eid}" / "steps.log").read_text().split()
    assert steps == list(PROFILES["metadata"])
    count = "SELECT count(*) FROM episode_stats WHERE episode_id = %s"
    assert pg_conn.execute(count, (eid,)).fetchone()[0] > 0  # type: ignore[index]
    relabel = run(stack, "relabel", eid)
    assert relabel["counts"] == {"SUCCESS": 1}, relabel

    row = pg_conn.execute(
        "SELECT e.uri, count(c.*) FROM episodes e JOIN episode_containers c"
        " ON c.episode_id = e.id WHERE e.id = %s GROUP BY e.uri",
        (eid,),
    ).fetchone()
    assert row == (first.uri, 1)
    labels = pg_conn.execute(
        "SELECT key, author FROM episode_labels WHERE episode_id = %s AND key = 'outcome'",
        (eid,),
    ).fetchall()
    assert labels == [("outcome", "pipeline:enrich")]

    Path(second.uri.removeprefix("file://")).unlink()
    args = ("pipeline", "run", "--profile", "metadata", "--episode", second.episode_id)
    refused = stack.quarry(*args)
    assert refused.returncode == 2, refused.stderr
    assert "missing" in refused.stderr and second.episode_id in refused.stderr
