"""``quarry cache warm | status | evict``: the node-local cache under ``<state-dir>/cache``.

``warm`` brings a manifest onto the node by ID from the running service (into
``<state-dir>/manifests``, once: ``quarry train`` on the same state folder then finds it there)
and downloads its containers from the object store (local files under ``<state-dir>/objects``
by default; ``s3://`` URIs use the default AWS credential chain). ``status`` and ``evict``
work on the folder alone, with no service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from loader.cache import NodeCache
from loader.config import CacheConfig
from loader.errors import LoaderError
from loader.metrics import CacheStatus
from loader.warm import manifest_refs, warm_cache
from manifests.errors import ManifestError
from manifests.manifest import open_manifest
from quarry.client import node_manifest, resolve_manifest
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.errors import QuarryError
from quarry.progress import Progress
from quarry.settings import Settings

DEFAULT_CAPACITY = CacheConfig.model_fields["capacity_bytes"].default
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


class CacheCommandError(QuarryError):
    """The cache or a manifest could not be used; the message says which object and why."""

    exit_code = 1


class ByteSize(click.ParamType[int, Any]):
    """A size in bytes: ``1000000``, ``500MB``, ``200GiB`` (K/M/G/T, powers of 1024 with i)."""

    name = "bytes"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _SIZE.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a size such as 1000000, 500MB or 200GiB", param, ctx)
        number, unit, binary = match.groups()
        power = "kmgt".index(unit.lower()) + 1 if unit else 0
        return int(float(number) * (1024 if binary else 1000) ** power)


BYTES = ByteSize()


@contextmanager
def _cache_errors() -> Iterator[None]:
    """Loader and manifest errors leave the command as one-line errors (``--debug`` shows all)."""
    try:
        yield
    except (LoaderError, ManifestError) as exc:
        raise CacheCommandError(str(exc)) from exc


def open_cache(settings: Settings, capacity: int | None) -> NodeCache:
    """The state folder's cache with ``capacity`` bytes, or the capacity it last recorded;
    warns on stderr when the disk cannot hold that capacity (the cache then stays within what
    it can hold)."""
    root = settings.paths.cache
    if capacity is None:
        capacity = NodeCache(CacheConfig(root=root)).recorded_capacity() or DEFAULT_CAPACITY
    cache = NodeCache(CacheConfig(root=root, capacity_bytes=capacity))
    warning = cache.status().capacity_warning
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    return cache


@click.group()
def cache() -> None:
    """The node-local cache of episode containers."""


@cache.command()
@STATE_DIR
@JSON
@click.option(
    "--manifest",
    "manifest_id",
    required=True,
    help="Manifest ID (or a unique prefix of 8+ hex digits) to warm from.",
)
@click.option("--capacity", type=BYTES, default=None, help="Cache capacity (default: as recorded).")
@click.option("--threads", type=click.IntRange(1, 256), default=8, help="Parallel downloads.")
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Progress on stderr (a bar on a terminal, plain lines otherwise).",
)
def warm(
    state_dir: Path | None,
    as_json: bool,
    manifest_id: str,
    capacity: int | None,
    threads: int,
    progress: bool,
) -> None:
    """Download a manifest's containers into the cache; run again to resume."""
    settings = build_settings(state_dir)
    manifest_id = resolve_manifest(settings, manifest_id)
    manifest_path = node_manifest(settings, manifest_id)
    with _cache_errors():
        node_cache = open_cache(settings, capacity)
        refs = manifest_refs(open_manifest(manifest_path))
        with Progress("warm", "B", enabled=progress) as hook:
            report = warm_cache(node_cache, refs, threads=threads, progress=hook)
    payload = {"manifest_id": manifest_id, **asdict(report)}
    emit(payload, as_json, _describe_warm(payload))
    if report.failed:
        raise CacheCommandError(f"{len(report.failed)} of {report.objects} objects failed")


@cache.command()
@STATE_DIR
@JSON
@click.option("--capacity", type=BYTES, default=None, help="Report against this capacity.")
def status(state_dir: Path | None, as_json: bool, capacity: int | None) -> None:
    """Objects, bytes, capacity, and node-wide hit/miss/byte counters."""
    with _cache_errors():
        current = open_cache(build_settings(state_dir), capacity).status()
    emit(current.to_dict(), as_json, _describe_status(current))


@cache.command()
@STATE_DIR
@JSON
@click.option(
    "--target-bytes",
    type=BYTES,
    default=0,
    show_default=True,
    help="Evict least recently used objects until at most this much is in use.",
)
def evict(state_dir: Path | None, as_json: bool, target_bytes: int) -> None:
    """Evict objects no running process holds, least recently used first."""
    with _cache_errors():
        node_cache = open_cache(build_settings(state_dir), None)
        objects, freed = node_cache.evict(target_bytes)
        after = node_cache.status()
    payload = {"evicted_objects": objects, "evicted_bytes": freed, "status": after.to_dict()}
    text = f"evicted {objects} objects, {_size(freed)}; {_size(after.used_bytes)} in use"
    emit(payload, as_json, text)


def _size(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _describe_warm(report: dict[str, Any]) -> str:
    lines = [
        f"manifest      {report['manifest_id']}",
        f"objects       {report['objects']}",
        f"already local {report['already_local']}",
        f"fetched       {report['fetched']} ({_size(report['bytes_fetched'])})",
        f"streamed      {report['streamed']} (do not fit in the cache)",
        f"seconds       {report['seconds']:.1f}",
    ]
    lines += [f"failed        {who}: {why}" for who, why in report["failed"].items()]
    return "\n".join(lines)


def _describe_status(status: CacheStatus) -> str:
    m = status.metrics
    share = status.used_bytes / status.capacity_bytes
    return "\n".join(
        [
            f"cache      {status.root}",
            f"capacity   {_size(status.capacity_bytes)}"
            + (
                f" (effective {_size(status.effective_capacity_bytes)})"
                if status.capacity_warning
                else ""
            ),
            f"used       {_size(status.used_bytes)} ({share:.1%})",
            f"objects    {status.objects} local, {status.preparing} preparing, "
            f"{status.pinned} pinned",
            f"free disk  {_size(status.free_disk_bytes)}",
            f"hits       {m.hits} ({_size(m.bytes_hit)}), hit rate {m.hit_rate:.1%}",
            f"misses     {m.misses}, fills {m.fills} ({_size(m.bytes_fetched)} fetched)",
            f"streams    {m.streams} ({_size(m.bytes_streamed)})",
            f"evictions  {m.evictions} ({_size(m.bytes_evicted)}), corrupt {m.corrupt}",
        ]
    )


def register(group: click.Group) -> None:
    group.add_command(cache)
