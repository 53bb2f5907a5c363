"""The trainer's settings: one object per process, built at the entry point and passed down.

Values come from, in order of precedence: command-line flags, ``--set key.path=value``
overrides, the ``--config`` file (JSON or TOML), then the defaults here. Nothing here reads the
environment; torchrun's rendezvous variables are read once, by :mod:`trainer.world`.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loader.config import LoaderConfig, ManifestConfig
from loader.layout import NodeLayout

from .errors import ConfigError

DAY_S = 86_400.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSection(_Section):
    """The DataLoader around the loader's dataset.

    :param num_workers: worker processes per rank assembling batches (0: in the rank itself).
    :param prefetch_batches: batches each worker prepares ahead.
    :param stream_batches: batches a background thread takes off the workers' queue and keeps
        ready while the step computes (0: each is taken in the step).
    :param start_method: how workers start; ``fork`` is fastest, and no checkpoint thread is
        running when a new epoch's workers are forked.
    :param timeout_s: longest wait for one batch from a worker, seconds (0: no limit).
    """

    num_workers: int = Field(default=1, ge=0)
    prefetch_batches: int = Field(default=2, ge=1)
    stream_batches: int = Field(default=2, ge=0)
    start_method: Literal["fork", "forkserver", "spawn"] = "fork"
    timeout_s: float = Field(default=0.0, ge=0)


class ModelSection(_Section):
    """The policy network: a small CNN per camera, an MLP over state, an MLP head.

    :param channels: output channels of the encoder's stride-2 convolutions.
    :param embed_dim: width of each camera's and the state's embedding.
    :param hidden_dim: width of the head's hidden layers.
    :param head_layers: hidden layers of the head.
    """

    channels: tuple[int, ...] = (16, 32, 64)
    embed_dim: int = Field(default=64, ge=1)
    hidden_dim: int = Field(default=256, ge=1)
    head_layers: int = Field(default=2, ge=1)


class OptimSection(_Section):
    """AdamW. :param lr: learning rate. :param grad_clip: max global gradient norm (0: off).

    :param shard: shard the optimizer state (ZeRO-1): ``none``, ``global`` (over every rank),
        ``node`` (over each node's ranks, replicated across nodes), ``auto`` (``node`` on
        several nodes, else ``global``); see :mod:`trainer.sharding`.
    """

    lr: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=1e-4, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(default=1.0, ge=0)
    shard: Literal["none", "global", "node", "auto"] = "none"


class CheckpointSection(_Section):
    """Checkpoints (torch.distributed.checkpoint).

    :param mode: ``async`` stages to memory and writes in a thread on a dedicated gloo group;
        ``sync`` blocks training for the whole write.
    :param interval: ``young_daly`` (sqrt(2 x C x MTBF), C measured from this run's saves) or
        ``steps`` (every ``interval_steps``).
    :param interval_steps: the fixed interval, and the first one under Young/Daly.
    :param min_interval_steps: lower bound of the Young/Daly interval, steps.
    :param max_interval_steps: upper bound of the Young/Daly interval, steps.
    :param mtbf_node_s: mean time between failures of one node, seconds; the job's MTBF is
        this divided by the node count.
    :param keep_last: complete checkpoints kept; older ones are deleted.
    :param save_final: write a checkpoint after the last step.
    :param resume: load the latest complete checkpoint of the run at start.
    """

    mode: Literal["sync", "async"] = "async"
    interval: Literal["young_daly", "steps"] = "young_daly"
    interval_steps: int = Field(default=100, ge=1)
    min_interval_steps: int = Field(default=1, ge=1)
    max_interval_steps: int = Field(default=100_000, ge=1)
    mtbf_node_s: float = Field(default=30 * DAY_S, gt=0)
    keep_last: int = Field(default=3, ge=1)
    save_final: bool = True
    resume: bool = True


class PreflightSection(_Section):
    """Gates a node must pass before it joins the job.

    :param enabled: run the checks at all.
    :param warm_cache: warm the node's share of the cache before training.
    :param min_free_disk_bytes: free bytes needed where checkpoints go; ``None`` estimates it
        from the model and optimizer size times ``keep_last + 1``.
    :param smoke_bytes: payload of the timed all-reduce, bytes.
    :param smoke_rounds: timed all-reduce rounds.
    :param max_smoke_s: the smoke test fails when its rounds take longer, seconds.
    """

    enabled: bool = True
    warm_cache: bool = True
    min_free_disk_bytes: int | None = Field(default=None, ge=0)
    smoke_bytes: int = Field(default=1 << 20, ge=4)
    smoke_rounds: int = Field(default=3, ge=1)
    max_smoke_s: float = Field(default=60.0, gt=0)


class GoodputSection(_Section):
    """Goodput accounting and its export.

    :param peak_flops: peak FLOP/s of one device, for MFU (H100 dense bf16: ~989e12).
    :param textfile: write Prometheus text files under ``<run dir>/metrics``.
    :param pushgateway_url: also push to a Prometheus Pushgateway at this URL.
    :param otlp_endpoint: also export over OTLP/HTTP when the SDK is installed.
    :param heartbeat_s: how often rank 0 records progress (used to date a failure), seconds.
    :param export_every_s: how often metrics are exported during the run, seconds.
    :param warmup_steps: steps at the start of each attempt (workers starting, queues filling)
        left out of the steady-state data wait (``data_wait_share``); always in goodput.
    """

    peak_flops: float = Field(default=1e12, gt=0)
    textfile: bool = True
    pushgateway_url: str | None = None
    otlp_endpoint: str | None = None
    heartbeat_s: float = Field(default=1.0, gt=0)
    export_every_s: float = Field(default=10.0, gt=0)
    warmup_steps: int = Field(default=5, ge=0)


class LaunchSection(_Section):
    """How :func:`trainer.launch.launch` starts torchrun.

    :param nnodes: nodes, or an elastic range ``MIN:MAX``.
    :param nproc_per_node: worker processes per node.
    :param max_restarts: restarts of the worker group before the job fails.
    :param rdzv_endpoint: ``host:port`` of the rendezvous; ``None`` runs standalone (one node).
    :param rdzv_backend: torchrun rendezvous backend.
    :param node_rank: this node's rank (static rendezvous only).
    :param monitor_interval_s: how often torchrun checks its workers, seconds.
    """

    nnodes: str = "1"
    nproc_per_node: int = Field(default=2, ge=1)
    max_restarts: int = Field(default=3, ge=0)
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "c10d"
    node_rank: int | None = None
    monitor_interval_s: float = Field(default=0.5, gt=0)


class FaultSection(_Section):
    """Fault injection for drills, tests and the benchmark (off unless ``kill_at_step`` is set).

    :param kill_rank: the global rank that kills itself (SIGKILL).
    :param kill_at_step: the step at whose start it does so.
    :param attempt: only in this attempt (torchrun restart count).
    :param step_delay_s: seconds every rank waits at the start of each step, in every
        attempt, so that a drill can act while the job runs (remove a node mid-run).
    """

    kill_rank: int = 0
    kill_at_step: int | None = None
    attempt: int = 0
    step_delay_s: float = Field(default=0.0, ge=0)


class TrainerConfig(_Section):
    """Settings of one training run (the same on every rank).

    :param state_dir: the node's state folder (manifests/, cache/, checkpoints/, runs/).
    :param run_name: the run's identity: its checkpoints and records live under it, and a
        restarted worker resumes from them.
    :param steps: optimizer steps to train in total (across restarts).
    :param seed: seed of model init, the sample order and per-worker RNGs.
    :param threads: intra-op CPU threads per rank.
    :param deterministic: ``torch.use_deterministic_algorithms(True)``.
    :param backend: process-group backend; ``auto`` is NCCL on CUDA, gloo otherwise.
    :param dist_timeout_s: timeout of collectives and of joining the job, seconds.
    :param log_every: log a line every this many steps (rank 0).
    :param record_samples: append each step's sample indices to ``<run>/samples/rank<r>.jsonl``.
    """

    state_dir: Path = Path(".quarry")
    run_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,128}$")
    steps: int = Field(default=100, ge=0)
    seed: int = 0
    threads: int = Field(default=1, ge=1)
    deterministic: bool = True
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    dist_timeout_s: float = Field(default=600.0, gt=0)
    log_every: int = Field(default=10, ge=1)
    record_samples: bool = False
    manifest: ManifestConfig = ManifestConfig()
    loader: LoaderConfig
    data: DataSection = DataSection()
    model: ModelSection = ModelSection()
    optim: OptimSection = OptimSection()
    checkpoint: CheckpointSection = CheckpointSection()
    preflight: PreflightSection = PreflightSection()
    goodput: GoodputSection = GoodputSection()
    launch: LaunchSection = LaunchSection()
    faults: FaultSection = FaultSection()

    @model_validator(mode="before")
    @classmethod
    def _default_loader(cls, data: Any) -> Any:
        """Give the loader a cache under the state folder and the run's seed, unless set."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        loader = dict(data.get("loader") or {})
        cache = dict(loader.get("cache") or {})
        cache.setdefault("root", str(NodeLayout(Path(data.get("state_dir", ".quarry"))).cache))
        loader["cache"] = cache
        loader.setdefault("seed", data.get("seed", 0))
        data["loader"] = loader
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.checkpoint.min_interval_steps > self.checkpoint.max_interval_steps:
            raise ValueError("checkpoint.min_interval_steps exceeds max_interval_steps")
        if not math.isfinite(self.goodput.peak_flops):
            raise ValueError("goodput.peak_flops must be finite")
        return self

    @property
    def runs_dir(self) -> Path:
        """Run records (config, progress, samples, failures, metrics, summary) per run."""
        return NodeLayout(self.state_dir).runs

    @property
    def checkpoints_dir(self) -> Path:
        """Checkpoints, one folder per run."""
        return NodeLayout(self.state_dir).checkpoints

    @property
    def manifests_dir(self) -> Path:
        """The node's manifest copies, ``<id>.arrow``."""
        return NodeLayout(self.state_dir).manifests

    def to_json(self) -> str:
        """The settings as JSON, secrets included (the file written for the workers is 0600)."""
        data = self.model_dump(mode="json")
        secret = self.loader.store.s3_secret
        if secret is not None:
            data["loader"]["store"]["s3_secret"] = secret.get_secret_value()
        return json.dumps(data, indent=2, sort_keys=True)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (``["a", "b", "c"]``, value); the value is JSON when it parses."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override must be key.path=value, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.split("."), value


def apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value``, creating nested dicts on the way."""
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def read_config_file(path: Path) -> dict[str, Any]:
    """A JSON (``.json``) or TOML (anything else) settings file, as a dict."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc}", path=str(path)) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"malformed config file: {exc}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise ConfigError("config file must hold an object", path=str(path))
    return data


def load_config(
    path: Path | None = None,
    overrides: Iterable[str] = (),
    values: Mapping[str, Any] | None = None,
) -> TrainerConfig:
    """Build the settings: file, then ``key.path=value`` overrides, then dotted ``values``.

    :raises ConfigError: the file or an override is malformed, or a value is invalid.
    """
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    for text in overrides:
        apply_override(data, *parse_override(text))
    for key, value in (values or {}).items():
        if value is not None:
            apply_override(data, key.split("."), value)
    try:
        return TrainerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid trainer settings: {_first_errors(exc)}") from exc


def _first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(p) for p in error["loc"]) or "(root)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
