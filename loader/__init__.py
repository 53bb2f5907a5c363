"""Object-store access, the node-local cache and torch datasets that assemble samples.

``import loader`` does not import torch; the datasets (and :class:`~loader.dataset.BatchStream`)
live in :mod:`loader.dataset`.
See ``docs/loader.md``.
"""

from .cache import Lease, NodeCache, ObjectRef
from .config import CacheConfig, LoaderConfig, StoreConfig
from .delivery import cached_manifest, fetch_manifest
from .errors import (
    BadEpisodeError,
    CacheError,
    CacheFullError,
    ChecksumError,
    LoaderError,
    ObjectNotFoundError,
    ObjectStoreError,
    SamplerStateError,
)
from .metrics import CacheMetrics, CacheStatus
from .sampler import EpochSampler
from .store import ObjectStore
from .warm import WarmReport, manifest_refs, warm_cache

__all__ = [
    "BadEpisodeError",
    "CacheConfig",
    "CacheError",
    "CacheFullError",
    "CacheMetrics",
    "CacheStatus",
    "ChecksumError",
    "EpochSampler",
    "Lease",
    "LoaderConfig",
    "LoaderError",
    "NodeCache",
    "ObjectNotFoundError",
    "ObjectRef",
    "ObjectStore",
    "ObjectStoreError",
    "SamplerStateError",
    "StoreConfig",
    "WarmReport",
    "cached_manifest",
    "fetch_manifest",
    "manifest_refs",
    "warm_cache",
]
