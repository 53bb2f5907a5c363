"""``deploy/kubernetes/trainer-pytorchjob.yaml``, the trainer as a Kubeflow PyTorchJob, checked
without a cluster: it validates against the schema written from the operator's documented v1
API (``deploy/kubernetes/pytorchjob.schema.json``), its pods run the torchrun command line the
trainer's own launcher builds for a job of that many nodes, the trainer accepts its arguments,
and the variables torchrun gives each rank make a valid world with one node leader per pod."""

from __future__ import annotations

import json
import re
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from trainer.__main__ import build_config, default_run_name, parse_args
from trainer.launch import agent_environment, torchrun_command
from trainer.world import World

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "deploy" / "kubernetes" / "trainer-pytorchjob.yaml"
SCHEMA = ROOT / "deploy" / "kubernetes" / "pytorchjob.schema.json"
#: What the operator gives every pod: the Master's service and the port named pytorchjob-port.
OPERATOR_ENV = {"MASTER_ADDR": "quarry-train-master-0", "MASTER_PORT": "23456"}
SECRET = {"service-url": "http://quarry-service:8000", "token": "qry_x"}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    return dict(yaml.safe_load(JOB.read_text()))


def container(job: dict[str, Any], role: str) -> dict[str, Any]:
    spec = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
    return dict(next(c for c in spec["containers"] if c["name"] == "pytorch"))


def pod_env(job: dict[str, Any], role: str) -> dict[str, str]:
    """The container's environment as Kubernetes makes it: its own values, the Secret's keys,
    the operator's variables."""
    env = dict(OPERATOR_ENV)
    for item in container(job, role)["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "quarry-trainer"
            env[item["name"]] = SECRET[ref["key"]]
    return env


def expanded(words: list[str], env: dict[str, str]) -> list[str]:
    """``$(VAR)`` references replaced as the kubelet does (every one must resolve)."""
    return [_REFERENCE.sub(lambda m: env[m.group(1)], word) for word in words]


def test_the_job_validates_against_the_pytorchjob_schema(job: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(job, schema, cls=jsonschema.Draft7Validator)
    broken = deepcopy(job)
    broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2  # one Master only
    misspelt = deepcopy(job)
    misspelt["spec"]["pytorchReplicaSpecs"]["Workers"] = misspelt["spec"][
        "pytorchReplicaSpecs"
    ].pop("Worker")
    renamed = deepcopy(job)
    renamed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "name"
    ] = "trainer"  # the operator configures the container named pytorch
    for bad in (broken, misspelt, renamed):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft7Validator)


def test_every_pod_runs_the_launchers_torchrun_command(job: dict[str, Any]) -> None:
    replicas = job["spec"]["pytorchReplicaSpecs"]
    nodes = sum(spec["replicas"] for spec in replicas.values())
    for role in replicas:
        pytorch = container(job, role)
        assert {p["name"]: p["containerPort"] for p in pytorch["ports"]} == {
            "pytorchjob-port": int(OPERATOR_ENV["MASTER_PORT"])
        }
        env = pod_env(job, role)
        command = expanded(pytorch["command"], env)
        split = command.index("trainer") - 1
        assert command[split : split + 2] == ["-m", "trainer"]
        launcher, trainer_args = command[:split], command[split + 2 :]
        args = parse_args(trainer_args)
        assert args.service_url == SECRET["service-url"]
        assert args.manifest == env["QUARRY_MANIFEST_ID"]
        config = build_config(args, World())
        config = config.model_copy(
            update={
                "launch": config.launch.model_copy(
                    update={
                        "nnodes": str(nodes),
                        "nproc_per_node": int(launcher[launcher.index("--nproc-per-node") + 1]),
                        "rdzv_endpoint": f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
                    }
                )
            }
        )
        built = torchrun_command(config, Path("unused.json"), "python")
        assert built[: built.index("trainer") - 1] == launcher  # nnodes, restarts, rdzv, id
        assert agent_environment(config, env) == env  # what launch_run would add, it has


def test_the_token_is_the_secrets_file_and_the_node_folder_is_per_pod(
    job: dict[str, Any],
) -> None:
    for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
        pod = spec["template"]["spec"]
        pytorch = container(job, role)
        command = expanded(pytorch["command"], pod_env(job, role))
        args = parse_args(command[command.index("trainer") + 1 :])
        mounts = {m["name"]: m["mountPath"] for m in pytorch["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        token = volumes["token"]["secret"]
        assert token["secretName"] == "quarry-trainer"
        assert args.token_file == Path(mounts["token"]) / token["items"][0]["path"]
        assert token["items"][0]["key"] == "token"
        assert args.state_dir == Path(mounts["node-state"])
        assert "emptyDir" in volumes["node-state"]  # one download and one cache per node


def test_torchruns_variables_make_one_world_with_a_leader_per_pod(job: dict[str, Any]) -> None:
    replicas = job["spec"]["pytorchReplicaSpecs"]
    nodes = sum(spec["replicas"] for spec in replicas.values())
    pytorch = container(job, "Master")
    env = pod_env(job, "Master")
    command = expanded(pytorch["command"], env)
    nproc = int(command[command.index("--nproc-per-node") + 1])
    run_id = command[command.index("--rdzv-id") + 1]
    args = parse_args(command[command.index("trainer") + 1 :])
    config = build_config(args, World())
    ranks, leaders = set(), 0
    for node in range(nodes):
        for local in range(nproc):
            world = World.from_environ(
                {
                    "WORLD_SIZE": str(nodes * nproc),
                    "RANK": str(node * nproc + local),
                    "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(nproc),
                    "GROUP_RANK": str(node),
                    "GROUP_WORLD_SIZE": str(nodes),
                    "TORCHELASTIC_RUN_ID": run_id,
                    **OPERATOR_ENV,
                }
            )
            assert (world.num_nodes, world.node_rank) == (nodes, node)
            assert default_run_name(config, world) == config.run_name == run_id
            ranks.add(world.rank)
            leaders += world.is_node_leader
    assert ranks == set(range(nodes * nproc)) and leaders == nodes
