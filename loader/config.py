"""Loader configuration: one object per concern, built at the entry point and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

MiB = 1024 * 1024
GiB = 1024 * MiB


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StoreConfig(_Config):
    """Object-store access through fsspec.

    :param s3_endpoint_url: S3 endpoint (e.g. a MinIO, moto or on-prem gateway URL).
    :param s3_key: S3 access key id; ``None`` uses the default credential chain.
    :param s3_secret: S3 secret access key.
    :param s3_region: S3 region name.
    :param s3_anon: anonymous S3 access.
    :param options: extra fsspec storage options per protocol, e.g.
        ``{"alluxio": {"etcd_hosts": "10.0.0.5", "target_protocol": "s3"}}``.
    :param block_bytes: read size of streamed (uncached) objects, bytes; fsspec's
        ``readahead`` buffer keeps one such block ahead of the reader.
    """

    s3_endpoint_url: str | None = None
    s3_key: str | None = None
    s3_secret: SecretStr | None = None
    s3_region: str | None = None
    s3_anon: bool = False
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    block_bytes: int = Field(default=4 * MiB, gt=0)


class CacheConfig(_Config):
    """The node-local cache.

    :param root: the cache folder (one per node; every process on the node shares it).
    :param capacity_bytes: most bytes the cached objects may take, bytes.
    :param min_free_bytes: free disk space to leave on the cache's filesystem, bytes.
    :param lock_timeout_s: longest wait for another process's download of the same object,
        seconds; a fill that takes longer makes the waiter raise a retryable ``CacheError``.
    :param warm_threads: parallel downloads when warming from a manifest.
    :param verify_on_open: hash a cached object on every open (else only size and mtime are
        checked on open; the full SHA-256 is checked when the object is filled).
    :param copy_block_bytes: read size while downloading an object, bytes.
    """

    root: Path
    capacity_bytes: int = Field(default=100 * GiB, gt=0)
    min_free_bytes: int = Field(default=0, ge=0)
    lock_timeout_s: float = Field(default=600.0, gt=0)
    warm_threads: int = Field(default=8, ge=1, le=256)
    verify_on_open: bool = False
    copy_block_bytes: int = Field(default=4 * MiB, gt=0)


class ManifestConfig(_Config):
    """Where a node's manifest comes from (see :func:`loader.delivery.deliver_manifest`).

    :param id: manifest ID (hex SHA-256) to fetch from the service.
    :param service_url: the Quarry service, e.g. ``http://127.0.0.1:8000``.
    :param token_file: file holding the bearer token (read by local rank 0 only).
    :param path: a local manifest file to run from instead of the service.
    :param http_timeout_s: timeout of one HTTP read, seconds.
    :param attempts: download attempts on retryable failures (5xx, connection errors).
    :param wait_s: how long other local ranks wait for local rank 0's copy, seconds.
    :param reverify: hash an already-present local copy again at every start.
    """

    id: str | None = None
    service_url: str | None = None
    token_file: Path | None = None
    path: Path | None = None
    http_timeout_s: float = Field(default=60.0, gt=0)
    attempts: int = Field(default=3, ge=1)
    wait_s: float = Field(default=600.0, gt=0)
    reverify: bool = False


BadEpisodePolicy = Literal["skip_and_count", "fail"]


class LoaderConfig(_Config):
    """Everything a training process needs to read a manifest's samples.

    :param cache: the node-local cache.
    :param store: object-store access.
    :param seed: seed of the epoch permutation (same on every rank).
    :param batch_size: samples per batch per rank.
    :param bad_episode: ``"fail"`` raises ``BadEpisodeError``; ``"skip_and_count"`` drops the
        sample and counts it in the batch's ``bad_samples``.
    :param sample_spec: overrides the manifest's sample spec (dict form), if given.
    :param normalize: normalize state and actions with the manifest's ``norm_stats``.
    :param open_readers: episode readers kept open per worker (an LRU).
    :param sampler_block: the epoch sampler's block (``EpochSampler(block=...)``): samples of
        consecutive anchors served together, so a reader decodes their video once; 1 is the
        plain shuffle. 8 by default: a batch of 32 holds at least 4 stretches of video, each
        at most 8 anchors long (docs/loader.md, "Sampler"). A resumed run keeps the block of
        its checkpoint.
    :param decode_threads: threads that decode a sample's cameras side by side (FFmpeg
        releases the GIL) while the reading thread reads state and actions; 1 decodes in the
        reading thread. ``None`` picks: the cores this process may run on in the process that
        made the dataset, 1 in its DataLoader workers (which already run side by side).
    """

    cache: CacheConfig
    store: StoreConfig = Field(default_factory=StoreConfig)
    seed: int = 0
    batch_size: int = Field(default=32, ge=1)
    bad_episode: BadEpisodePolicy = "fail"
    sample_spec: dict[str, Any] | None = None
    normalize: bool = True
    open_readers: int = Field(default=4, ge=1)
    sampler_block: int = Field(default=8, ge=1)
    decode_threads: int | None = Field(default=None, ge=1)
