"""Manifest delivery to a node, object-store access, the node-local cache and torch datasets
that assemble samples.

``import loader`` does not import torch; the datasets (and :class:`~loader.dataset.BatchStream`)
live in :mod:`loader.dataset`.
See ``docs/loader.md``.
"""

from .cache import Lease, NodeCache, ObjectRef
from .config import CacheConfig, LoaderConfig, ManifestConfig, StoreConfig
from .delivery import deliver_manifest
from .errors import (
    BadEpisodeError,
    CacheError,
    CacheFullError,
    ChecksumError,
    LoaderError,
    ManifestDeliveryError,
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
    "ManifestConfig",
    "ManifestDeliveryError",
    "NodeCache",
    "ObjectNotFoundError",
    "ObjectRef",
    "ObjectStore",
    "ObjectStoreError",
    "SamplerStateError",
    "StoreConfig",
    "WarmReport",
    "deliver_manifest",
    "manifest_refs",
    "warm_cache",
]
