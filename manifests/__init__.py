"""Manifest format: build from a query result, store, open by mmap, index and shard.

A manifest is an uncompressed Arrow IPC file, one row per episode slice, named by the SHA-256
of its bytes; see ``docs/manifests.md``.
"""

from .build import DEFAULT_BATCH_ROWS, ManifestInfo, build_manifest, prepare_table
from .diff import ManifestDiff, diff_manifests
from .errors import (
    ManifestCorruptError,
    ManifestError,
    ManifestFormatError,
    ManifestIdError,
    ManifestIndexError,
    ManifestIOError,
    ManifestNotFoundError,
    ManifestSchemaError,
)
from .index import SampleIndex
from .manifest import (
    MIN_ID_PREFIX,
    Manifest,
    ManifestRow,
    is_manifest_id,
    manifest_ref,
    open_manifest,
)
from .meta import ManifestMeta
from .schema import FORMAT_VERSION, REQUIRED_FIELDS, SUPPORTED_VERSIONS
from .stats import FieldStats
from .store import ManifestStore

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "FORMAT_VERSION",
    "MIN_ID_PREFIX",
    "REQUIRED_FIELDS",
    "SUPPORTED_VERSIONS",
    "FieldStats",
    "Manifest",
    "ManifestCorruptError",
    "ManifestDiff",
    "ManifestError",
    "ManifestFormatError",
    "ManifestIOError",
    "ManifestIdError",
    "ManifestIndexError",
    "ManifestInfo",
    "ManifestMeta",
    "ManifestNotFoundError",
    "ManifestRow",
    "ManifestSchemaError",
    "ManifestStore",
    "SampleIndex",
    "build_manifest",
    "diff_manifests",
    "is_manifest_id",
    "manifest_ref",
    "open_manifest",
    "prepare_table",
]
