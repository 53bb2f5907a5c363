"""Pipeline workers on two hosts that share nothing but TCP: Postgres on ``db``, moto's S3 on
``s3`` (the containers every worker writes and reads), workers on ``w1`` and ``w2``, each
with its own executor ID and state folder (its step files). A reprocess batch runs across
both; ``w1`` is removed for good in the middle of a workflow's ``encode``; ``w2`` finds it
silent and recovers its workflow (DBOS's recovery of another executor's pending workflows,
not a restart of ``w1``), which resumes at ``encode`` with the earlier steps read back (their
step files, left on ``w1``, made again from the source). Every episode is registered once,
with one new version, every stamp current.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pipeline.job import STEPS
from pipeline.worker import DEAD_AFTER_S, HEARTBEAT_S
from tests.deploy.test_multihost_training import (
    KEYS,
    QUARRY,
    S3_PORT,
    open_postgres_binaries,
    role,
)
from tests.fixtures.multihost import PYTHON, Host, Network, start_moto

ROLES = "tests.deploy.multihost_roles"
EPISODES = 6
OLD, NEW = 1, 3
BUCKET = "objects"
#: The brief's bound on handing a lost worker's workflows to a live one.
RECOVERY_BOUND_S = 30.0


def pipeline_env(db: Host, s3: Host, password: str) -> dict[str, str]:
    """A worker's settings: Postgres and S3 by address, containers in S3, one recording per
    batch (so that both workers have work while w1 holds its workflow)."""
    return {
        "QUARRY_PIPELINE__BATCH_EPISODES": "1",
        "QUARRY_SOURCE_DSN": (
            f"host={db.address} port=5432 user=postgres password={password} dbname=quarry"
        ),
        "QUARRY_PIPELINE__OBJECTS_URL": f"s3://{BUCKET}/quarry",
        "QUARRY_PIPELINE__S3__ENDPOINT": f"{s3.address}:{S3_PORT}",
        "QUARRY_PIPELINE__S3__KEY_ID": KEYS["aws_access_key_id"],
        "QUARRY_PIPELINE__S3__SECRET": KEYS["aws_secret_access_key"],
        "QUARRY_PIPELINE__S3__USE_SSL": "false",
        "QUARRY_PIPELINE__S3__URL_STYLE": "path",
    }


def query(host: Host, env: dict[str, str], sql: str) -> list[list[Any]]:
    """Rows of ``sql`` in the operational database, read from ``host`` over TCP."""
    code = (
        "import json, os, psycopg;"
        "c = psycopg.connect(os.environ['QUARRY_SOURCE_DSN']);"
        f"print(json.dumps([list(r) for r in c.execute({sql!r}).fetchall()], default=str))"
    )
    return list(json.loads(host.python(code, env)))


def wait_until(check: Any, timeout_s: float, what: str) -> float:
    """Poll ``check`` until it is true; the seconds it took."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.1)
    return time.monotonic() - start


def steps_log(host: Host, run_id: str, episode_id: str) -> list[str]:
    path = host.state / "pipeline" / "work" / f"{run_id}_{episode_id}" / "steps.log"
    return path.read_text().split() if path.is_file() else []


def test_a_lost_worker_hosts_workflows_finish_on_another(network: Network) -> None:
    begin = time.monotonic()
    db, s3, w1, w2 = (network.add(n) for n in ("db", "s3", "w1", "w2"))
    open_postgres_binaries()
    pg = {"state": str(db.state), "address": db.address, "subnet": "10.77.0.0/24"}
    starting = db.popen([PYTHON, "-m", ROLES, "postgres", json.dumps(pg)], log=db.state / "pg.log")
    start_moto(s3, S3_PORT)  # meanwhile
    assert starting.wait(timeout=300) == 0, (db.state / "pg.log").read_text()[-3000:]
    password = json.loads((db.state / "pg.log").read_text().splitlines()[-1])["password"]
    env = pipeline_env(db, s3, password)
    endpoint = {"endpoint_url": f"http://{s3.address}:{S3_PORT}", **KEYS}
    corpus = role(
        w2, "stale", dsn=env["QUARRY_SOURCE_DSN"], s3=endpoint, bucket=BUCKET,
        objects=str(w2.state / "objects"), episodes=EPISODES, version=OLD,
    )  # fmt: skip
    ids: list[str] = corpus["episodes"]

    episodes = [arg for eid in ids for arg in ("--episode", eid)]
    run = [QUARRY, "pipeline", "run", "--profile", "reprocess", "--json"]
    enqueued = w2.run(
        [*run, "--pipeline-version", str(NEW), *episodes, "--state-dir", str(w2.state)], env
    )
    run_id = json.loads(enqueued.stdout)["run_id"]

    pause = w1.state / "pause"
    pause.touch()
    worker = [QUARRY, "worker", "--executor-id"]
    w1.popen(
        [
            *worker,
            "w1",
            "--pause-before",
            "encode",
            "--pause-file",
            str(pause),
            "--state-dir",
            str(w1.state),
        ],
        env,
    )
    held: list[str] = []

    def w1_paused() -> bool:
        held[:] = [
            e
            for e in ids
            if (w1.state / "pipeline" / "work" / f"{run_id}_{e}" / "paused-encode").exists()
        ]
        return bool(held)

    wait_until(w1_paused, 60, "w1 in the middle of a workflow")
    w2.popen([*worker, "w2", "--state-dir", str(w2.state)], env)
    wait_until(lambda: any(steps_log(w2, run_id, e) for e in ids), 60, "w2 working")
    lost = held[0]
    assert steps_log(w1, run_id, lost) == ["fetch", "decode", "transform", "encode"]

    w1.kill()  # for good: its processes, its link, its namespace
    recovered = wait_until(
        lambda: bool(steps_log(w2, run_id, lost)), RECOVERY_BOUND_S, "w2 resuming w1's workflow"
    )
    # Taken once w1's last heartbeat (up to HEARTBEAT_S before the kill) is DEAD_AFTER_S old.
    assert recovered >= DEAD_AFTER_S - HEARTBEAT_S - 0.5, recovered
    show = [QUARRY, "pipeline", "show", run_id, "--json", "--state-dir", str(w2.state)]

    def finished() -> bool:
        state = json.loads(w2.run(show, env, check=False).stdout or "{}")
        return bool(state.get("finished"))

    wait_until(finished, 60, "the run finished")
    state = json.loads(w2.run(show, env).stdout)
    assert state["counts"] == {"SUCCESS": EPISODES}, state
    # Resumed at encode: fetch, decode, transform read back from DBOS, not run as steps again.
    assert steps_log(w2, run_id, lost) == list(STEPS[3:])
    for eid in ids:
        if eid != lost:
            assert steps_log(w2, run_id, eid) in ([], list(STEPS)), eid

    executors = query(
        w2, env, "SELECT workflow_uuid, executor_id FROM quarry_pipeline.workflow_status"
        f" WHERE workflow_uuid LIKE '{run_id}:%'",
    )  # fmt: skip
    assert dict(executors)[f"{run_id}:{lost}"] == "w2"
    rows = query(
        w2, env, "SELECT e.id::text, e.pipeline_version, e.uri, count(c.*),"
        " count(*) FILTER (WHERE c.superseded_at IS NULL)"
        " FROM episodes e JOIN episode_containers c ON c.episode_id = e.id GROUP BY e.id",
    )  # fmt: skip
    assert sorted(r[0] for r in rows) == sorted(ids)
    for eid, version, uri, versions, current in rows:
        assert (version, versions, current) == (NEW, 2, 1), eid
        assert uri.startswith(f"s3://{BUCKET}/quarry/episodes/"), uri
    labels = query(
        w2, env, "SELECT episode_id::text, count(*) FROM episode_labels WHERE key = 'outcome'"
        " GROUP BY episode_id",
    )  # fmt: skip
    assert sorted(map(tuple, labels)) == sorted((eid, 1) for eid in ids)
    print(f"recovered in {recovered:.1f} s after the kill; test {time.monotonic() - begin:.1f} s")
