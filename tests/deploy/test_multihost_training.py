"""The data path across hosts that share nothing but TCP: Postgres on ``db``, moto's S3 on
``s3`` (episodes and the warehouse's Parquet), the service on ``svc``, the CDC follower on
``cdc``, a fleet uploader on ``fleet``, and one training job (``torchrun --nnodes 2``) on
``t0`` and ``t1``, whose checkpoints and run records are on a folder both mount (the shared
filesystem the trainer needs). Each node pulls the manifest once into its own state folder
and has its own cache; then ``t1`` is removed for good, a fresh ``t1b`` takes its place, and
the job resumes with the same samples per step and the same weights as an uninterrupted run.

Not here yet: two service replicas (a curation POSTed to one, served by the other) needs the
manifests in S3 (the ``external`` work).
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
# torch 2.13's c10d rendezvous shares its TCP store with the workers by default; then a node
# that replaces a lost one never joins: the surviving rank-0 agent keeps its first round's
# store address and never publishes MASTER_ADDR in the new round, which the new node's agent
# waits for ("wait timeout after 60000ms, keys: /torch.rendezvous.faulty.1/MASTER_ADDR").
AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
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
        return node.popen(command, AGENT_ENV, log=node.state / f"{run}.log")


def outcome(node: Host, run: str, process: subprocess.Popen[Any]) -> Any:
    """The agent's result (its last output line) once it ends; the job must have ended well."""
    process.wait(timeout=150)
    log = (node.state / f"{run}.log").read_text()
    assert process.returncode == 0, log[-3000:]
    result = json.loads(log.splitlines()[-1])
    assert result["exit_code"] == 0, log[-3000:]
    return result


def pulls(db: Host, manifest_id: str) -> list[str]:
    """The addresses that downloaded the manifest, as the service recorded them."""
    code = (
        "import json, psycopg; from quarry.stack.postgres import EmbeddedPostgres;"
        "from quarry.stack.paths import StatePaths;"
        f"s = EmbeddedPostgres(StatePaths.at({str(db.state)!r}));"
        "c = psycopg.connect(s.dsn('quarry'));"
        "q = 'SELECT address FROM manifest_pulls WHERE manifest_id = %s ORDER BY id';"
        f"print(json.dumps([r[0] for r in c.execute(q, ({manifest_id!r},))]))"
    )
    return list(json.loads(db.python(code)))


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
    """The running parts, as a trainer node sees them: the service, its token, the curated
    manifest, S3; ``db`` to read what the service recorded."""

    db: Host
    url: str
    token: str
    manifest_id: str
    s3_url: str


def start_data_path(network: Network) -> DataPath:
    """Postgres, S3, the fleet's episodes, the warehouse, the follower and the service, each
    on its own host, and a curation of every episode once the follower has mirrored them."""
    db, s3, svc, cdc, fleet = (network.add(n) for n in ("db", "s3", "svc", "cdc", "fleet"))
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
    svc.run([QUARRY, "migrate", "--state-dir", str(svc.state)], env, timeout=300)
    cdc.popen([QUARRY, "cdc", "follow", "--state-dir", str(cdc.state)], env)
    serve = ["serve", "--host", svc.address, "--port", str(SERVICE_PORT)]
    svc.popen([QUARRY, *serve, "--state-dir", str(svc.state)], env)
    fleet.wait_for_port(svc.address, SERVICE_PORT, timeout_s=120)
    url, token = f"http://{svc.address}:{SERVICE_PORT}", (db.state / "admin.token").read_text()
    sql = "SELECT * FROM episodes"
    curated = role(fleet, "curate", url=url, token=token.strip(), sql=sql, rows=EPISODES,
                   timeout_s=120)  # fmt: skip
    return DataPath(db, url, token.strip(), curated["manifest_id"], endpoint["endpoint_url"])


@pytest.mark.slow
def test_a_job_on_two_hosts_resumes_a_lost_node_exactly(network: Network, tmp_path: Path) -> None:
    path = start_data_path(network)
    db, manifest_id = path.db, path.manifest_id
    job = Job(
        network,
        tmp_path,
        {
            "token": path.token,
            "manifest.id": manifest_id,
            "manifest.service_url": path.url,
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
    assert sorted(pulls(db, manifest_id)) == sorted([t0.address, t1.address])
    containers = set(pa.ipc.open_file(t0.state / "manifests" / f"{manifest_id}.arrow")
                     .read_all()["sha256"].to_pylist())  # fmt: skip
    for node in (t0, t1):
        assert (node.state / "manifests" / f"{manifest_id}.arrow").is_file()
        assert cached(node) and cached(node) <= containers  # its share, fetched from S3

    rdzv, elastic = f"{t0.address}:{RDZV_PORT + 1}", {"launch.max_restarts": 2}
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
