"""The baseline: a manifest built by walking the object store, the way curation worked before
the warehouse (DESIGN.md, "Performance"; issue 6, item 9).

It lists the episode prefix, then visits every container, one after another, with four
storage trips each, and only then filters:

1. exists: ``HEAD`` on the container (it may have been deleted since it was listed; gives
   the size);
2. sidecar: ``GET`` of the JSON next to it (robot, task, operator, success, QC flags,
   checksum);
3. header: a ranged ``GET`` of the container's tail (MCAP footer and summary: chunk index,
   time range);
4. count: a ranged ``GET`` of its metadata record (rates and layout), after which the slice's
   samples are counted against the sample spec.

Trips 3 and 4 are the project's own ``EpisodeReader`` opening the container over s3fs with no
read-ahead. The result goes through the same ``build_manifest`` as the service's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from fleet import sidecar_key
from fsspec.spec import AbstractFileSystem
from pinned import CURATION_SQL, REAL_PREFIX, SPEC

from episodes.reader import EpisodeReader
from manifests import ManifestInfo, ManifestMeta, build_manifest

Row = dict[str, Any]
EXTRAS = ("robot_id", "task_id", "operator")
SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("uri", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("num_samples", pa.int64()),
        ("size_bytes", pa.int64()),
        ("sha256", pa.string()),
        *((name, pa.string()) for name in EXTRAS),
    ]
)


def selects(side: Row) -> bool:
    """``CURATION_SQL``'s filter, evaluated on a sidecar."""
    return bool(
        side["robot_id"] == "koi-02"
        and side["task_id"] == "pick_place_cube"
        and side["success"]
        and not side["quality_flags"]
        and side["operator"] in ("op-ana", "op-ben")
    )


def visit(fs: AbstractFileSystem, key: str) -> tuple[Row, Row]:
    """The four trips of one episode: its manifest row and its sidecar."""
    size = int(fs.info(key, refresh=True)["size"])
    side = json.loads(fs.cat_file(sidecar_key(key)))
    with (
        fs.open(key, "rb", cache_type="none", size=size) as handle,
        EpisodeReader(handle, name=key) as reader,
    ):
        start_ns, end_ns = reader.info.start_ns, reader.info.end_ns
        requests = reader.requests
    if requests != 2:
        raise RuntimeError(f"{key}: the header took {requests} reads, not 2")
    row = {
        "episode_id": side["episode_id"],
        "uri": "s3://" + key,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "num_samples": int(SPEC.count_samples(start_ns, end_ns)),
        "size_bytes": size,
        "sha256": side["sha256"],
        **{name: side[name] for name in EXTRAS},
    }
    return row, side


def walk_curation(fs: AbstractFileSystem, out_dir: Path) -> tuple[ManifestInfo, int]:
    """Build the manifest of ``CURATION_SQL`` by walking the store; return it and how many
    containers were visited."""
    keys = sorted(k for k in fs.find(REAL_PREFIX) if k.endswith(".mcap"))
    kept = []
    for key in keys:
        row, side = visit(fs, key)
        if selects(side) and row["num_samples"] > 0:
            kept.append(row)
    table = pa.Table.from_pylist(kept, schema=SCHEMA)
    meta = ManifestMeta(sql=CURATION_SQL, sample_spec=SPEC.to_dict())
    return build_manifest(table, meta, out_dir), len(keys)
