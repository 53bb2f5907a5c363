"""Manifests of synthetic rows in three formats, and probes that open them in fresh processes.

The probes run as ``python benchmarks/loader.py --probe ...``, so that each measures a process
that has opened nothing else.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from pinned import BUCKET, MB, META, SPEC, Params

from manifests import DEFAULT_BATCH_ROWS, REQUIRED_FIELDS, build_manifest
from manifests import open_manifest as open_mmap

SCRIPT = Path(__file__).resolve().parents[1] / "loader.py"
Writer = Callable[[int, Path, int], None]


# --- synthetic manifests ------------------------------------------------------------------


def _fixed(prefix: bytes, numbers: np.ndarray, digits: int, suffix: bytes = b"") -> pa.Array:
    """Strings ``prefix + zero-padded number + suffix``, built as one buffer (no Python loop)."""
    powers = 10 ** np.arange(digits - 1, -1, -1, dtype=np.int64)
    body = ((numbers[:, None] // powers) % 10 + 48).astype(np.uint8)
    parts = [np.frombuffer(prefix, np.uint8), body, np.frombuffer(suffix, np.uint8)]
    n = len(numbers)
    chars = np.hstack([np.broadcast_to(p, (n, p.shape[-1])) if p.ndim == 1 else p for p in parts])
    offsets = np.arange(n + 1, dtype=np.int32) * chars.shape[1]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def _hex_digests(rng: np.random.Generator, n: int) -> pa.Array:
    table = np.frombuffer(b"0123456789abcdef", np.uint8)
    raw = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    chars = np.empty((n, 64), np.uint8)
    chars[:, 0::2], chars[:, 1::2] = table[raw >> 4], table[raw & 15]
    offsets = np.arange(n + 1, dtype=np.int32) * 64
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def synth_batches(rows: int, seed: int) -> Iterator[pa.RecordBatch]:
    """Manifest rows in final order (sorted ids, running ``sample_offset``), a batch at a time."""
    schema = pa.schema(REQUIRED_FIELDS)
    offset = 0
    for start in range(0, rows, DEFAULT_BATCH_ROWS):
        n = min(DEFAULT_BATCH_ROWS, rows - start)
        rng = np.random.default_rng([seed, start])
        ids = np.arange(start, start + n, dtype=np.int64)
        counts = rng.integers(20, 200, n, dtype=np.int64)
        begin = np.full(n, 1_700_000_000 * 10**9, dtype=np.int64) + ids * 10**9
        columns = [
            _fixed(b"ep-", ids, 12),
            _fixed(f"s3://{BUCKET}/episodes/ep-".encode(), ids, 12, b".mcap"),
            pa.array(begin),
            pa.array(begin + counts * SPEC.anchor_step_ns),
            pa.array(counts),
            pa.array(offset + np.cumsum(counts) - counts),
            pa.array(rng.integers(10**6, 10**8, n, dtype=np.int64)),
            _hex_digests(rng, n),
        ]
        offset += int(counts.sum())
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


class _Hashing(io.RawIOBase):
    """A write-only file that hashes what passes through it (the manifest ID, in one pass)."""

    def __init__(self, raw: io.BufferedWriter) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        return self.raw.write(view)


def write_manifest(rows: int, folder: Path, seed: int) -> Path:
    """Stream a manifest of ``rows`` rows to ``<folder>/<id>.arrow`` (memory: one batch)."""
    schema = pa.schema(REQUIRED_FIELDS, metadata=META.to_metadata())
    part = folder / f"part-{rows}"
    options = ipc.IpcWriteOptions(compression=None, use_threads=False)
    with part.open("wb") as raw:
        sink = _Hashing(raw)
        with ipc.new_file(sink, schema, options=options) as writer:
            for batch in synth_batches(rows, seed):
                writer.write_batch(batch.replace_schema_metadata(META.to_metadata()))
    return part.rename(folder / f"{sink.digest.hexdigest()}.arrow")


def check_format(path: Path, folder: Path, seed: int) -> bool:
    """Whether ``build_manifest`` over the same rows writes the same bytes (the same ID)."""
    rows = open_mmap(path).num_rows
    table = pa.Table.from_batches(list(synth_batches(rows, seed))).drop_columns(["sample_offset"])
    return bool(build_manifest(table, META, folder / "check").path.name == path.name)


def write_parquet(rows: int, path: Path, seed: int) -> None:
    with pq.ParquetWriter(path, pa.schema(REQUIRED_FIELDS)) as writer:
        for batch in synth_batches(rows, seed):
            writer.write_batch(batch)


def write_json(rows: int, path: Path, seed: int) -> None:
    with path.open("w") as out:
        out.write("[")
        for i, batch in enumerate(synth_batches(rows, seed)):
            out.write(("," if i else "") + ",".join(map(json.dumps, batch.to_pylist())))
        out.write("]")


# --- probes: run in fresh processes ----------------------------------------------------------


def _rss_mb() -> dict[str, float]:
    """This process's resident memory: anonymous (private) and file-backed (shared), MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {k: int(fields[k].split()[0]) * 1024 / MB for k in ("RssAnon", "RssFile")}


def _warm_up() -> None:
    """First uses of pyarrow (IPC, Parquet), numpy and json allocate pools and caches: make
    them before measuring, so a probe's RSS growth is the opened manifest's."""
    batch = next(synth_batches(1_000, 0))
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    table = ipc.open_file(pa.BufferReader(sink.getvalue())).read_all()
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    table = pq.read_table(pa.BufferReader(out.getvalue()))
    _lookup("json", json.loads(json.dumps(table.to_pylist())), np.arange(10))
    _lookup("parquet", table, np.arange(10))


def _lookup(fmt: str, handle: Any, samples: np.ndarray) -> None:
    """Find each sample's row and read that row's fields, the way a loader does."""
    if fmt == "mmap":
        rows, _ = handle.index.locate_many(samples)
        for r in rows.tolist():
            handle.row(r)
    elif fmt == "parquet":
        offsets = handle["sample_offset"].to_numpy()
        for r in (np.searchsorted(offsets, samples, side="right") - 1).tolist():
            handle.slice(r, 1).to_pylist()
    else:
        offsets = [row["sample_offset"] for row in handle]
        for s in samples.tolist():
            handle[bisect.bisect_right(offsets, s) - 1]


def _total_samples(fmt: str, handle: Any) -> int:
    if fmt == "mmap":
        return int(handle.num_samples)
    last = handle.slice(handle.num_rows - 1).to_pylist()[0] if fmt == "parquet" else handle[-1]
    return int(last["sample_offset"] + last["num_samples"])


OPENERS = {
    "mmap": open_mmap,
    "parquet": pq.read_table,
    "json": lambda path: json.loads(Path(path).read_bytes()),
}


def probe_open(fmt: str, path: str, repeats: int, lookups: int) -> dict[str, float]:
    """Open ``path`` ``repeats`` times; RSS growth after the first open and its lookups."""
    _warm_up()
    before = _rss_mb()
    started = time.perf_counter()
    handle = OPENERS[fmt](path)
    times = [time.perf_counter() - started]
    index_started = time.perf_counter()
    samples = np.random.default_rng(0).integers(0, _total_samples(fmt, handle), lookups)
    _lookup(fmt, handle, samples)
    after = _rss_mb()
    figures = {
        "lookup_s": time.perf_counter() - index_started,
        "rss_mb": sum(after.values()) - sum(before.values()),
        "private_mb": after["RssAnon"] - before["RssAnon"],
    }
    if fmt == "mmap":
        started = time.perf_counter()
        open_mmap(path).index  # noqa: B018 - the sample index, built on first use
        figures["index_ms"] = (time.perf_counter() - started) * 1e3
    del handle
    for _ in range(repeats - 1):
        started = time.perf_counter()
        handle = OPENERS[fmt](path)
        times.append(time.perf_counter() - started)
        del handle
    return {**figures, "open_ms": statistics.median(times) * 1e3}


def _rollup_kb(pid: int) -> dict[str, int]:
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines)}


def probe_hold(path: str) -> None:
    """Map the manifest, touch every page, report PSS before, hold until stdin closes."""
    before = _rollup_kb(os.getpid())
    manifest = open_mmap(path)
    for b in range(manifest.num_batches):
        for column in manifest.batch(b).columns:
            for buffer in column.buffers():
                if buffer is not None and buffer.size:
                    int(np.frombuffer(buffer, np.uint8)[::4096].sum())
    print(json.dumps({"pss_kb": before["Pss"], "rss_kb": before["Rss"]}), flush=True)
    sys.stdin.read()


def run_probe(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--probe", *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


# --- manifests: open, memory, shared pages ---------------------------------------------------


def measure_open(p: Params, folder: Path) -> dict[str, Any]:
    figures: dict[str, dict[str, dict[int, float]]] = {
        k: {"mmap": {}, "parquet": {}, "json": {}}
        for k in ("open_ms", "rss_mb_per_rank", "private_mb_per_rank")
    }
    index_ms, sizes, format_ok = {}, {}, True
    for rows in p.manifest_rows:
        path = write_manifest(rows, folder, p.seed)
        sizes[rows] = path.stat().st_size / MB
        if rows == p.manifest_rows[0]:
            format_ok = check_format(path, folder, p.seed)
        got = run_probe("open", "mmap", str(path), str(p.open_repeats), str(p.lookups))
        figures["open_ms"]["mmap"][rows], index_ms[rows] = got["open_ms"], got["index_ms"]
        figures["rss_mb_per_rank"]["mmap"][rows] = got["rss_mb"]
        figures["private_mb_per_rank"]["mmap"][rows] = got["private_mb"]
        if rows <= p.parquet_max_rows:
            _baseline(p, figures, "parquet", rows, folder / f"{rows}.parquet", write_parquet)
        path.unlink()
    _baseline(p, figures, "json", p.json_rows, folder / f"{p.json_rows}.json", write_json)
    return {**figures, "index_ms": index_ms, "manifest_mb": sizes, "format_check": format_ok}


def _baseline(
    p: Params, figures: dict[str, Any], fmt: str, rows: int, path: Path, write: Writer
) -> None:
    write(rows, path, p.seed)
    got = run_probe("open", fmt, str(path), str(p.baseline_repeats), str(p.lookups))
    figures["open_ms"][fmt][rows] = got["open_ms"]
    figures["rss_mb_per_rank"][fmt][rows] = got["rss_mb"]
    figures["private_mb_per_rank"][fmt][rows] = got["private_mb"]
    path.unlink()


def measure_pss(p: Params, folder: Path) -> dict[str, float]:
    """8 processes map one manifest; sum of their PSS growth, read while all hold it."""
    path = write_manifest(p.pss_rows, folder, p.seed)
    command = [sys.executable, str(SCRIPT), "--probe", "hold", str(path)]
    ranks = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(p.ranks)
    ]
    try:
        before = [json.loads(rank.stdout.readline()) for rank in ranks]  # type: ignore[union-attr]
        now = [_rollup_kb(rank.pid) for rank in ranks]
    finally:
        for rank in ranks:
            rank.communicate("")
    size_mb = path.stat().st_size / MB
    path.unlink()
    pss = sum(n["Pss"] - b["pss_kb"] for n, b in zip(now, before, strict=True)) * 1024 / MB
    rss = sum(n["Rss"] - b["rss_kb"] for n, b in zip(now, before, strict=True)) * 1024 / MB
    return {
        "pss_manifest_mb": size_mb,
        "pss_mb_8_ranks": pss,
        "pss_copies": pss / size_mb,
        "rss_mb_8_ranks": rss,
    }
