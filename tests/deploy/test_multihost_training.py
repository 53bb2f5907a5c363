"""The data path across hosts that share nothing but TCP: Postgres on ``db``, moto's S3 on
``s3`` (episodes, the warehouse's Parquet and the manifests), two service replicas on ``svca``
and ``svcb``, the CDC follower on ``cdc``, a fleet uploader on ``fleet``, and one training job
(``torchrun --nnodes 2``) on ``t0`` and ``t1``, whose checkpoints and run records are on a
folder both mount (the shared filesystem the trainer needs).

A curation POSTed to replica A is served by replica B (registry entry, Arrow file, card) and
neither replica's state folder holds it. A curation job is queued on A and A is removed while
the job runs: B reads the job as running within its lease, then as failed with the reason
(``JobLostError``), and the registry and the bucket hold exactly the manifests they held
before. The trainers pull the manifest from B: each node once into its own state folder, with
its own cache; then ``t1`` is removed for good, a fresh ``t1b`` takes its place, and the job
resumes with the same samples per step and the same weights as an uninterrupted run (``launch_run``
sets what torch needs for a replacement node to join; nothing here does).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch

from quarry.stack.postgres import _bin
from tests.fixtures.multihost import PYTHON, VENV, Host, Network, start_moto
from tests.trainer.test_trainer_train import consumed_samples, final_weights
from trainer.launch import LaunchResult

QUARRY = str(VENV / "bin" / "quarry")
ROLES = "tests.deploy.multihost_roles"
EPISODES = 4
S3_PORT, SERVICE_PORT, RDZV_PORT = 5000, 8000, 29400
KEYS = {"aws_access_key_id": "quarry-key", "aws_secret_access_key": "quarry-secret"}
STEPS = 24
# A curation job that runs for minutes (a six-way cross join of the per-episode statistics),
# so that it is still running when its replica is removed.
LONG_SQL = (
    "SELECT a.episode_id AS id FROM episode_stats a, episode_stats b, episode_stats c, "
    "episode_stats d, episode_stats e, episode_stats f "
    "WHERE a.sum + b.sum + c.sum + d.sum + e.sum + f.sum = -1.5"
)
JOB = {
    "steps": STEPS,
    "loader.batch_size": 4,
    "model.channels": [8],
    "model.embed_dim": 16,
    "model.hidden_dim": 32,
    "data.num_workers": 0,
    "checkpoint.mode": "sync",
    "checkpoint.interval": "steps",
    "checkpoint.interval_steps": 3,
    "launch.nnodes": "2",
    "launch.nproc_per_node": 1,
    "launch.monitor_interval_s": 0.2,
    "launch.max_restarts": 0,
    "record_samples": True,
}


def role(host: Host, name: str, **arguments: Any) -> Any:
    done = host.run([PYTHON, "-m", ROLES, name, json.dumps(arguments)], timeout=300)
    return json.loads(done.stdout.splitlines()[-1])


def open_postgres_binaries() -> None:
    """Let the Postgres system user reach the venv's binaries, as the embedded stack does at
    its start (``EmbeddedPostgres._hand_over``): on a host the venv is read-only, so the
    db host could not open a parent folder itself."""
    for parent in _bin("initdb").parents:
        mode = parent.stat().st_mode
        if mode & 0o055 != 0o055:
            parent.chmod(mode | 0o055)


def lake_env(db: Host, s3: Host, password: str) -> dict[str, str]:
    """The settings of the follower and the service: Postgres and S3 by address, nothing local."""
    dsn = f"host={db.address} port=5432 user=postgres password={password} dbname="
    return {
        "QUARRY_SOURCE_DSN": dsn + "quarry",
        "QUARRY_WAREHOUSE__CATALOG_DSN": dsn + "quarry_catalog",
        "QUARRY_WAREHOUSE__READER_CATALOG_DSN": (
            f"host={db.address} port=5432 user=quarry_reader dbname=quarry_catalog"
        ),
        "QUARRY_WAREHOUSE__DATA_URL": "s3://lake/warehouse",
        "QUARRY_WAREHOUSE__S3__ENDPOINT": f"{s3.address}:{S3_PORT}",
        "QUARRY_WAREHOUSE__S3__KEY_ID": KEYS["aws_access_key_id"],
        "QUARRY_WAREHOUSE__S3__SECRET": KEYS["aws_secret_access_key"],
        "QUARRY_WAREHOUSE__S3__USE_SSL": "false",
        "QUARRY_WAREHOUSE__S3__URL_STYLE": "path",
        "QUARRY_MANIFESTS__URL": "s3://lake/manifests",
        "QUARRY_MANIFESTS__S3__ENDPOINT": f"{s3.address}:{S3_PORT}",
        "QUARRY_MANIFESTS__S3__KEY_ID": KEYS["aws_access_key_id"],
        "QUARRY_MANIFESTS__S3__SECRET": KEYS["aws_secret_access_key"],
        "QUARRY_MANIFESTS__S3__USE_SSL": "false",
        "QUARRY_MANIFESTS__S3__URL_STYLE": "path",
    }


class Job:
    """One training job on trainer hosts, every node with the same settings: the state folder
    ``node`` is each host's own folder (its manifests, its cache), with ``checkpoints`` and
    ``runs`` from the cluster folder that every trainer host mounts."""

    def __init__(self, network: Network, root: Path, settings: dict[str, Any]) -> None:
        self.network, self.settings = network, settings
        self.node, self.cluster = root / "node", root / "cluster"

    def add_node(self, name: str) -> Host:
        mounts = {self.node: self.network.root / name}
        mounts |= {self.node / part: self.cluster / part for part in ("checkpoints", "runs")}
        node = self.network.add(name, mounts=mounts)
        (node.state / "token").write_text(self.settings["token"])
        return node

    def start(self, node: Host, run: str, rdzv: str, **values: Any) -> subprocess.Popen[Any]:
        settings = {
            **JOB,
            **{k: v for k, v in self.settings.items() if k != "token"},
            "manifest.token_file": str(self.node / "token"),
            "state_dir": str(self.node),
            "run_name": run,
            "launch.rdzv_endpoint": rdzv,
            **values,
        }
        command = [PYTHON, "-m", ROLES, "train", json.dumps({"settings": settings})]
        return node.popen(command, log=node.state / f"{run}.log")


def outcome(node: Host, run: str, process: subprocess.Popen[Any]) -> Any:
    """The agent's result (its last output line) once it ends; the job must have ended well."""
    process.wait(timeout=150)
    log = (node.state / f"{run}.log").read_text()
    assert process.returncode == 0, log[-3000:]
    result = json.loads(log.splitlines()[-1])
    assert result["exit_code"] == 0, log[-3000:]
    return result


def query(db: Host, sql: str, *params: str) -> list[list[Any]]:
    """The rows of ``sql`` on the operational database, read on the db host."""
    code = (
        "import json, psycopg, sys; from quarry.stack.postgres import EmbeddedPostgres;"
        "from quarry.stack.paths import StatePaths;"
        f"s = EmbeddedPostgres(StatePaths.at({str(db.state)!r}));"
        "c = psycopg.connect(s.dsn('quarry'));"
        "rows = c.execute(sys.argv[1], sys.argv[2:]).fetchall();"
        "print(json.dumps([list(r) for r in rows], default=str))"
    )
    return list(json.loads(db.run([PYTHON, "-c", code, sql, *params]).stdout))


def pulls(db: Host, manifest_id: str) -> list[str]:
    """The addresses that downloaded the manifest, as the service recorded them."""
    sql = "SELECT address FROM manifest_pulls WHERE manifest_id = %s ORDER BY id"
    return [row[0] for row in query(db, sql, manifest_id)]


def wait_for(folder: Path, pattern: str, timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while not list(folder.glob(pattern)):
        assert time.monotonic() < deadline, f"nothing at {folder}/{pattern} in {timeout_s} s"
        time.sleep(0.02)


def cached(node: Host) -> set[str]:
    """The content hashes of the objects in the node's own cache."""
    return {path.name for path in (node.state / "cache" / "objects").glob("*/*")}


@dataclass(frozen=True)
class DataPath:
    """The running parts, as a trainer node sees them: the two replicas (A where the curation
    was POSTed, B), their token, the curated manifest, S3; ``db`` to read what the service
    recorded, ``fleet`` to call the replicas and S3 from, the replicas' hosts."""

    db: Host
    fleet: Host
    replicas: tuple[Host, Host]
    urls: tuple[str, str]
    token: str
    manifest_id: str
    s3: dict[str, str]

    @property
    def s3_url(self) -> str:
        return self.s3["endpoint_url"]


def start_data_path(network: Network) -> DataPath:
    """Postgres, S3, the fleet's episodes, the warehouse, the follower and the service, each
    on its own host, and a curation of every episode once the follower has mirrored them."""
    names = ("db", "s3", "svca", "svcb", "cdc", "fleet")
    db, s3, svca, svcb, cdc, fleet = (network.add(n) for n in names)
    open_postgres_binaries()
    pg = {"state": str(db.state), "address": db.address, "subnet": "10.77.0.0/24"}
    starting = db.popen([PYTHON, "-m", ROLES, "postgres", json.dumps(pg)], log=db.state / "pg.log")
    start_moto(s3, S3_PORT)  # meanwhile
    assert starting.wait(timeout=300) == 0, (db.state / "pg.log").read_text()[-3000:]
    password = json.loads((db.state / "pg.log").read_text().splitlines()[-1])["password"]
    db.wait_for_port(db.address, 5432)  # on TCP, not only its socket
    env = lake_env(db, s3, password)
    endpoint = {"endpoint_url": f"http://{s3.address}:{S3_PORT}", **KEYS}
    dsn = env["QUARRY_SOURCE_DSN"]
    role(fleet, "fleet", dsn=dsn, s3=endpoint, buckets=["fleet", "lake"], episodes=EPISODES)
    svca.run([QUARRY, "migrate", "--state-dir", str(svca.state)], env, timeout=300)
    cdc.popen([QUARRY, "cdc", "follow", "--state-dir", str(cdc.state)], env)
    for svc in (svca, svcb):
        serve = ["serve", "--host", svc.address, "--port", str(SERVICE_PORT)]
        svc.popen([QUARRY, *serve, "--state-dir", str(svc.state)], env)
    for svc in (svca, svcb):
        fleet.wait_for_port(svc.address, SERVICE_PORT, timeout_s=120)
    urls = (f"http://{svca.address}:{SERVICE_PORT}", f"http://{svcb.address}:{SERVICE_PORT}")
    token = (db.state / "admin.token").read_text().strip()
    sql = "SELECT * FROM episodes"
    curated = role(fleet, "curate", url=urls[0], token=token, sql=sql, rows=EPISODES,
                   timeout_s=120)  # fmt: skip
    return DataPath(db, fleet, (svca, svcb), urls, token, curated["manifest_id"], endpoint)


def registry(path: DataPath) -> tuple[list[list[Any]], list[str]]:
    """The registered manifests (id, uri) and the manifest objects in the bucket."""
    rows = query(path.db, "SELECT id, uri FROM manifests ORDER BY id")
    listed = role(path.fleet, "objects", s3=path.s3, bucket="lake", prefix="manifests/")
    return rows, listed["keys"]


def check_replicas_share_nothing_but_postgres_and_s3(path: DataPath) -> str:
    """A's curation served by B; then a job queued on A, and A removed while it runs: B reads
    it as running (within its lease). Returns the job's id; nothing of it is registered."""
    (a, b), manifest_id = path.urls, path.manifest_id
    served = role(path.fleet, "served", url=b, token=path.token, manifest_id=manifest_id,
                  s3=path.s3, bucket="lake")  # fmt: skip
    assert served["show"][0] == 200 and served["show"][1]["id"] == manifest_id, served
    assert served["arrow"] == [200, served["stored"]] and manifest_id == served["stored"]
    assert served["etag"] == f'"{manifest_id}"'
    assert served["card"][0] == 200 and served["card"][1]["manifest_id"] == manifest_id
    assert served["card"][1]["episodes"] == EPISODES, served["card"]
    for svc in path.replicas:  # the bucket holds it; neither replica's disk does
        assert [p for p in svc.state.rglob("*.arrow")] == [], svc.name
    before = registry(path)
    assert before == ([[manifest_id, f"s3://lake/manifests/{manifest_id}.arrow"]],
                      [f"manifests/{manifest_id}.arrow"])  # fmt: skip
    running = role(path.fleet, "submit", url=a, status_url=b, token=path.token, sql=LONG_SQL)
    path.replicas[0].unplug()  # A is gone, mid-build: no FIN or RST reaches anyone
    path.replicas[0].kill()  # and for good
    every = ["queued", "running", "succeeded", "failed", "cancelled"]
    read = role(path.fleet, "job", url=b, token=path.token, job_id=running["id"],
                statuses=every, timeout_s=10)  # fmt: skip
    assert read["status"] == "running", read  # within its lease, B cannot know yet
    return str(running["id"])


def check_lost_job(path: DataPath, job_id: str) -> None:
    """The job A was running reads as failed on B, saying why; nothing half is registered."""
    failed = role(path.fleet, "job", url=path.urls[1], token=path.token, job_id=job_id,
                  statuses=["succeeded", "failed", "cancelled"], timeout_s=60)  # fmt: skip
    assert failed["status"] == "failed", failed
    assert failed["error"]["kind"] == "JobLostError", failed
    assert "no heartbeat" in failed["error"]["detail"]
    assert failed["result"] is None and failed["finished_at"]
    rows, keys = registry(path)
    assert rows == [[path.manifest_id, f"s3://lake/manifests/{path.manifest_id}.arrow"]]
    assert keys == [f"manifests/{path.manifest_id}.arrow"]
    # A's sessions on the operational database (the build's open transaction among them)
    # are gone: the service's keepalives and user timeout let the server drop them
    # (service/context.py, KEEPALIVE); without them they were still there 60 s on. (Its
    # catalog sessions, opened by DuckDB's postgres extension, stay: docs/deploy.md, Not
    # done yet.)
    left, deadline = sessions(path.db, path.replicas[0].address), time.monotonic() + 60
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left = sessions(path.db, path.replicas[0].address)
    assert left == [], left


def sessions(db: Host, address: str) -> list[list[Any]]:
    """The operational database's sessions of the client at ``address``: database, state,
    since when."""
    sql = (
        "SELECT datname, state, state_change FROM pg_stat_activity "
        "WHERE client_addr = %s AND datname = 'quarry'"
    )
    return query(db, sql, address)


@pytest.mark.slow
def test_a_job_on_two_hosts_resumes_a_lost_node_exactly(network: Network, tmp_path: Path) -> None:
    path = start_data_path(network)
    db, manifest_id = path.db, path.manifest_id
    lost_job = check_replicas_share_nothing_but_postgres_and_s3(path)  # leaves B alone
    job = Job(
        network,
        tmp_path,
        {
            "token": path.token,
            "manifest.id": manifest_id,
            "manifest.service_url": path.urls[1],  # B: A is gone
            "loader.store.s3_endpoint_url": path.s3_url,
            "loader.store.s3_key": KEYS["aws_access_key_id"],
            "loader.store.s3_secret": KEYS["aws_secret_access_key"],
            "loader.store.s3_region": "us-east-1",
        },
    )
    t0, t1 = job.add_node("t0"), job.add_node("t1")
    rdzv = f"{t0.address}:{RDZV_PORT}"
    runs = {n: job.start(n, "reference", rdzv) for n in (t0, t1)}
    reference = [outcome(n, "reference", p) for n, p in runs.items()]
    # one download per node, each into its own state folder and cache
    nodes = [a for a in pulls(db, manifest_id) if a != path.fleet.address]  # fleet read it once
    assert sorted(nodes) == sorted([t0.address, t1.address])
    containers = set(pa.ipc.open_file(t0.state / "manifests" / f"{manifest_id}.arrow")
                     .read_all()["sha256"].to_pylist())  # fmt: skip
    for node in (t0, t1):
        assert (node.state / "manifests" / f"{manifest_id}.arrow").is_file()
        assert cached(node) and cached(node) <= containers  # its share, fetched from S3

    # each step waits 0.25 s, so that the job is still running when t1 is removed after its
    # first checkpoint (without it a fast job could finish first, restarts 0)
    rdzv = f"{t0.address}:{RDZV_PORT + 1}"
    elastic = {"launch.max_restarts": 2, "faults.step_delay_s": 0.25}
    faulty = {n: job.start(n, "faulty", rdzv, **elastic) for n in (t0, t1)}
    wait_for(job.cluster / "checkpoints" / "faulty", "step-*/COMMITTED.json")
    assert not (job.cluster / "runs" / "faulty" / "summary.json").exists()
    t1.kill()  # the node is gone for good; a fresh one joins the same job in its place
    t1b = job.add_node("t1b")
    late = job.start(t1b, "faulty", rdzv, **elastic)
    results = [outcome(t0, "faulty", faulty[t0]), outcome(t1b, "faulty", late)]
    summary = results[0]["summary"] or results[1]["summary"]
    assert summary is not None
    assert (summary["world_size"], summary["nnodes"], summary["restarts"]) == (2, 2, 1)
    assert summary["steps_this_attempt"] < STEPS  # resumed from the shared checkpoints
    assert pulls(db, manifest_id).count(t1b.address) == 1  # the new node pulled once
    assert pulls(db, manifest_id).count(t0.address) == 1  # t0 kept its copy
    assert (t1b.state / "manifests" / f"{manifest_id}.arrow").is_file()
    assert cached(t1b) and cached(t1b) <= containers

    def as_result(run: str) -> LaunchResult:
        return LaunchResult(0, run, job.cluster / "runs" / run, reference[0]["summary"])

    expected = consumed_samples(as_result("reference"))
    assert len(expected) == 2 * STEPS and consumed_samples(as_result("faulty")) == expected
    state = job.cluster  # final_weights reads <state>/checkpoints/<run>
    weights = [final_weights(as_result(run), state) for run in ("reference", "faulty")]
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
    check_lost_job(path, lost_job)  # its lease ran out while the job trained
