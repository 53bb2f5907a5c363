"""The sample index: global sample number -> (row, offset in the slice), by binary search.

The cumulative ``sample_offset`` column is searched in place (numpy ``searchsorted`` over
zero-copy views of the mapped batches); the only array the index owns holds one value per
record batch. No Python object is made per sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .errors import ManifestIndexError
from .schema import SAMPLE_OFFSET

if TYPE_CHECKING:
    from .manifest import Manifest

Int64Array = npt.NDArray[np.int64]


class SampleIndex:
    """Maps global sample numbers of a manifest to (row, offset within the row's slice).

    ``side="right"`` searches land on the last row whose offset is <= the sample, which is
    the row that holds it even when rows with zero samples share its offset.
    """

    def __init__(self, manifest: Manifest) -> None:
        self._manifest = manifest
        # Zero-copy views into the map, one per batch: no bytes are copied, so keeping them
        # all costs a few hundred bytes per batch (65,536 rows) and makes a lookup O(log n).
        self._views = [manifest.column_view(b, SAMPLE_OFFSET) for b in range(manifest.num_batches)]
        self._batch_starts = np.array([int(v[0]) for v in self._views], dtype=np.int64)
        self._batch_rows = manifest.batch_rows
        self.num_samples = manifest.num_samples

    def _check(self, low: int, high: int) -> None:
        if low < 0 or high >= self.num_samples:
            bad = low if low < 0 else high
            raise ManifestIndexError(
                f"sample {bad} outside [0, {self.num_samples})", path=str(self._manifest.path)
            )

    def locate(self, sample: int) -> tuple[int, int]:
        """Global sample number -> (row, offset of the sample within the slice)."""
        sample = int(sample)
        self._check(sample, sample)
        batch = int(np.searchsorted(self._batch_starts, sample, side="right")) - 1
        offsets = self._views[batch]
        i = int(np.searchsorted(offsets, sample, side="right")) - 1
        return batch * self._batch_rows + i, sample - int(offsets[i])

    def locate_many(self, samples: npt.ArrayLike) -> tuple[Int64Array, Int64Array]:
        """Vectorized :meth:`locate`: int64 arrays of rows and offsets, same shape as input."""
        wanted = np.asarray(samples, dtype=np.int64).ravel()
        rows = np.empty_like(wanted)
        within = np.empty_like(wanted)
        if wanted.size == 0:
            return rows, within
        self._check(int(wanted.min()), int(wanted.max()))
        batches = np.searchsorted(self._batch_starts, wanted, side="right") - 1
        order = np.argsort(batches, kind="stable")
        sorted_batches = batches[order]
        for batch in np.unique(sorted_batches):
            lo, hi = np.searchsorted(sorted_batches, [batch, batch + 1])
            picks = order[lo:hi]
            offsets = self._views[int(batch)]
            i = np.searchsorted(offsets, wanted[picks], side="right") - 1
            rows[picks] = int(batch) * self._batch_rows + i
            within[picks] = wanted[picks] - offsets[i]
        shape = np.shape(samples)
        return rows.reshape(shape), within.reshape(shape)

    def row_offsets(self) -> Int64Array:
        """Every row's first global sample number, plus ``num_samples`` at the end.

        A copy of the ``sample_offset`` column (8 bytes per row), for consumers that search
        over rows many times (the sampler's node split).
        """
        parts = [
            self._manifest.column_view(b, SAMPLE_OFFSET) for b in range(len(self._batch_starts))
        ]
        parts.append(np.array([self.num_samples], dtype=np.int64))
        return np.concatenate(parts).astype(np.int64, copy=False)
