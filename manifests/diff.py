"""Compare two manifests: episodes added, removed and changed, and metadata changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .manifest import Manifest
from .schema import EPISODE_ID, INPUT_NAMES

_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class ManifestDiff:
    """What changed from manifest ``a`` to manifest ``b``.

    :param added: episode ids in ``b`` only, sorted.
    :param removed: episode ids in ``a`` only, sorted.
    :param changed: episode ids in both whose slices or containers differ, sorted.
    :param unchanged: number of episodes identical in both.
    :param metadata: metadata keys that differ, each mapped to its (``a``, ``b``) values.
    :param rows: (rows of ``a``, rows of ``b``).
    :param samples: (samples of ``a``, samples of ``b``).
    """

    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int
    metadata: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    rows: tuple[int, int] = (0, 0)
    samples: tuple[int, int] = (0, 0)

    @property
    def is_empty(self) -> bool:
        """Whether the two manifests hold the same episodes with the same metadata."""
        return not (self.added or self.removed or self.changed or self.metadata)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``quarry manifests diff --json``)."""
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "metadata": {k: {"a": a, "b": b} for k, (a, b) in self.metadata.items()},
            "rows": {"a": self.rows[0], "b": self.rows[1]},
            "samples": {"a": self.samples[0], "b": self.samples[1]},
        }


def _slice_keys(table: pa.Table) -> pa.ChunkedArray:
    """One string per row joining the fixed columns, so equal slices give equal keys."""
    parts = [pc.cast(table[name], pa.string()) for name in INPUT_NAMES]
    return pc.binary_join_element_wise(*parts, _SEPARATOR)


def _sorted_unique(values: pa.Array | pa.ChunkedArray) -> list[str]:
    unique = pc.unique(values)
    return [str(v) for v in pc.take(unique, pc.sort_indices(unique)).to_pylist()]


def _metadata_changes(a: Manifest, b: Manifest) -> dict[str, tuple[Any, Any]]:
    left, right = a.meta.to_dict(), b.meta.to_dict()
    left["extra_columns"], right["extra_columns"] = a.extra_columns, b.extra_columns
    return {k: (left[k], right[k]) for k in left if left[k] != right[k]}


def diff_manifests(a: Manifest, b: Manifest) -> ManifestDiff:
    """Compare manifest ``a`` (old) with ``b`` (new), vectorized over their rows.

    An episode is *changed* when it is in both and any of its slices differs in a fixed
    column (``uri``, ``start_ns``, ``end_ns``, ``num_samples``, ``size_bytes``, ``sha256``)
    or it has a different number of slices. Extra curation columns are compared by name only.
    """
    ta, tb = a.table(list(INPUT_NAMES)), b.table(list(INPUT_NAMES))
    keys_a, keys_b = _slice_keys(ta), _slice_keys(tb)
    ids_a, ids_b = ta[EPISODE_ID], tb[EPISODE_ID]
    touched_a = pc.filter(ids_a, pc.invert(pc.is_in(keys_a, value_set=pc.unique(keys_b))))
    touched_b = pc.filter(ids_b, pc.invert(pc.is_in(keys_b, value_set=pc.unique(keys_a))))
    unique_a, unique_b = pc.unique(ids_a), pc.unique(ids_b)
    in_both = pc.filter(unique_a, pc.is_in(unique_a, value_set=unique_b))
    touched = pa.chunked_array([touched_a, touched_b], type=pa.string())
    changed = pc.filter(in_both, pc.is_in(in_both, value_set=pc.unique(touched)))
    added = pc.filter(unique_b, pc.invert(pc.is_in(unique_b, value_set=unique_a)))
    removed = pc.filter(unique_a, pc.invert(pc.is_in(unique_a, value_set=unique_b)))
    return ManifestDiff(
        added=_sorted_unique(added),
        removed=_sorted_unique(removed),
        changed=_sorted_unique(changed),
        unchanged=len(in_both) - len(changed),
        metadata=_metadata_changes(a, b),
        rows=(a.num_rows, b.num_rows),
        samples=(a.num_samples, b.num_samples),
    )
