"""Quarry's side of ``benchmarks/peers.py``: serves samples through Quarry's own dataset class.

``serve_quarry.py DIR`` opens ``DIR/manifest`` (written by the driver over the containers
in ``DIR/episodes``) with :class:`loader.dataset.ManifestDataset` (the node cache under
``DIR/cache``, no normalization, so every system returns raw values) and answers the
driver's request lines (``blocks.serve``); a key is the manifest's global sample number.
"""

from __future__ import annotations

import sys
from pathlib import Path

from blocks import serve

from loader import CacheConfig, LoaderConfig
from loader.dataset import ManifestDataset


def main() -> int:
    data = Path(sys.argv[1])
    config = LoaderConfig(cache=CacheConfig(root=data / "cache"), normalize=False)
    dataset = ManifestDataset(next((data / "manifest").glob("*.arrow")), config)
    serve(dataset, lambda item: None, lambda: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
