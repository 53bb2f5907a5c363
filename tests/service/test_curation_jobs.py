"""Asynchronous curations: jobs that succeed, are cancelled mid-query, are lost with their
process; and a crowd of curations that never holds up the health checks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import RUNAWAY_SQL, wait_for

PROBLEM = "application/problem+json"


def submit(api: httpx.Client, **body: Any) -> dict[str, Any]:
    response = api.post("/v1/curations", params={"async": "true"}, json=body)
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    assert response.headers["location"] == job["url"]
    return job


def job_state(api: httpx.Client, job_id: str) -> dict[str, Any]:
    response = api.get(f"/v1/curations/jobs/{job_id}")
    assert response.status_code == 200, response.text
    state: dict[str, Any] = response.json()
    return state


def wait_status(api: httpx.Client, job_id: str, *statuses: str, timeout_s: float = 30) -> Any:
    def reached() -> dict[str, Any] | None:
        state = job_state(api, job_id)
        return state if state["status"] in statuses else None

    return wait_for(reached, timeout_s, what=f"job {job_id} to be {'/'.join(statuses)}")


def test_async_curation_succeeds_with_the_sync_result(api: httpx.Client) -> None:
    sql = "SELECT id, task_id FROM episodes WHERE steps > 1"
    job = submit(api, sql=sql, sample_spec={"anchor_stride": 7})
    assert job["status"] in ("queued", "running", "succeeded")
    done = wait_status(api, job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done["error"]
    assert done["started_at"] and done["finished_at"]
    sync = api.post("/v1/curations", json={"sql": sql, "sample_spec": {"anchor_stride": 7}})
    assert sync.json()["manifest_id"] == done["result"]["manifest_id"]
    assert sync.json()["reused"]
    assert api.get(done["result"]["manifest_url"]).status_code == 200


def test_mode_field_also_queues(api: httpx.Client) -> None:
    response = api.post("/v1/curations", json={"filters": {"success": True}, "mode": "async"})
    assert response.status_code == 202
    assert wait_status(api, response.json()["id"], "succeeded")["result"]["rows"] >= 0


def test_a_failing_job_says_why(api: httpx.Client) -> None:
    job = submit(api, sql="SELECT robot_id FROM episodes")  # passes the guard, names no id
    failed = wait_status(api, job["id"], "failed")
    assert failed["error"]["reason"] == "no_episode_id"
    assert failed["error"]["status"] == 400


def test_refused_sql_is_refused_before_queueing(api: httpx.Client) -> None:
    response = api.post("/v1/curations?async=true", json={"sql": "DROP TABLE episodes"})
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM


def test_cancel_interrupts_the_running_query(api: httpx.Client) -> None:
    job = submit(api, sql=RUNAWAY_SQL)
    wait_status(api, job["id"], "running")
    time.sleep(0.5)  # inside the warehouse query by now
    asked = time.monotonic()
    response = api.delete(f"/v1/curations/jobs/{job['id']}")
    assert response.status_code == 200, response.text
    assert response.json()["cancel_requested"]
    cancelled = wait_status(api, job["id"], "cancelled", "failed", timeout_s=10)
    assert cancelled["status"] == "cancelled", cancelled
    # Stopped by the interrupt, long before the service's 30 s query time limit.
    assert time.monotonic() - asked < 5
    again = api.delete(f"/v1/curations/jobs/{job['id']}")
    assert again.status_code == 409
    assert again.headers["content-type"] == PROBLEM


@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_unknown_job_is_404(api: httpx.Client, job_id: str) -> None:
    for response in (
        api.get(f"/v1/curations/jobs/{job_id}"),
        api.delete(f"/v1/curations/jobs/{job_id}"),
    ):
        assert response.status_code == 404
        assert response.headers["content-type"] == PROBLEM


def test_a_job_whose_process_stopped_reads_as_failed(api: httpx.Client, corpus: Stack) -> None:
    job_id = str(uuid.uuid4())
    with psycopg.connect(corpus.settings.operational_dsn(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO curation_jobs (id, status, request, author, owner, heartbeat_at) "
            "VALUES (%s, 'running', '{}', 'someone', 'a-process-long-gone', "
            "now() - interval '1 hour')",
            (job_id,),
        )
    state = job_state(api, job_id)
    assert state["status"] == "failed"
    assert state["error"]["kind"] == "JobLostError"


@pytest.mark.slow
def test_many_curations_never_block_health_checks(api: httpx.Client) -> None:
    jobs = [submit(api, sql=RUNAWAY_SQL + f" AND a.dim <> {-n}") for n in range(10)]
    bare = httpx.Client(base_url=str(api.base_url), timeout=10)

    def quick_curation(n: int) -> int:
        return api.post(
            "/v1/curations", json={"sql": f"SELECT id FROM episodes LIMIT {n}"}
        ).status_code

    with ThreadPoolExecutor(6) as pool:
        sync = [pool.submit(quick_curation, n) for n in range(1, 7)]
        latencies = []
        for _ in range(10):
            started = time.monotonic()
            assert bare.get("/healthz").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
        assert [f.result() for f in sync] == [201] * 6
    assert max(latencies) < 2.0, latencies  # generous: two cores, shared with the builds
    for job in jobs:
        api.delete(f"/v1/curations/jobs/{job['id']}")
    for job in jobs:
        assert wait_status(api, job["id"], "cancelled", "failed")["status"] == "cancelled"


@pytest.mark.slow
def test_a_job_lost_with_its_killed_service_reads_as_failed(
    api: httpx.Client, corpus: Stack
) -> None:
    """A second service process on the same stack takes a job; killing it (SIGKILL, no
    cleanup) leaves a job the first service reports as failed once the lease runs out."""
    port = _free_port()
    code = (
        "import sys, uvicorn; from pathlib import Path; from service.app import create_app; "
        "from quarry.settings import Settings; "
        "uvicorn.run(create_app(Settings(state_dir=Path(sys.argv[1])).service_settings()), "
        "host='127.0.0.1', "
        "port=int(sys.argv[2]), log_level='warning')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(corpus.settings.state_dir), str(port)], env=env
    )
    try:
        second = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=api.headers)
        wait_for(lambda: _answers(second), 60, what="the second service")
        job = second.post(
            "/v1/curations", params={"async": "true"}, json={"sql": RUNAWAY_SQL}
        ).json()
        wait_status(api, job["id"], "running")
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait(30)
    assert job_state(api, job["id"])["status"] == "running"  # within its lease
    lost = wait_status(api, job["id"], "failed", timeout_s=60)
    assert lost["error"]["kind"] == "JobLostError"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False
