"""``quarry manifests list | show | diff | rebuild | episodes | card | edit | gc``: the manifest
registry, through the running service.

Every ID argument is a manifest's ID or a unique prefix of at least 8 hex digits (the IDs
``list`` prints are accepted everywhere); no such manifest exits 4, a malformed or ambiguous
one 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from manifests.diff import diff_manifests
from manifests.manifest import open_manifest
from quarry.client import ServiceClient, manifest_key, node_manifest, resolve_manifest
from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.commands._manifest_diff import describe_diff


def _client(state_dir: Path | None) -> ServiceClient:
    return ServiceClient.for_state(build_settings(state_dir))


@click.group()
def manifests() -> None:
    """Inspect and look after the manifest registry."""


@manifests.command("list")
@STATE_DIR
@JSON
@click.option("--limit", type=click.IntRange(1, 1000), default=50)
@click.option("--tag", default=None, help="Only manifests with this tag.")
def list_(state_dir: Path | None, as_json: bool, limit: int, tag: str | None) -> None:
    """Registered manifests, newest first: ID, rows, samples, creation, author, name, tags."""
    params: dict[str, Any] = {"limit": limit} | ({"tag": tag} if tag else {})
    page = _client(state_dir).get_json("/v1/manifests", **params)
    emit(page, as_json, "\n".join(_describe_entry(m) for m in page["items"]) or "no manifests")


def _describe_entry(m: dict[str, Any]) -> str:
    line = f"{m['id']}  {m['rows']:>8} rows  {m['samples']:>10} samples  {m['created_at']}  "
    line += str(m["author"])
    if m["name"]:
        line += f"  {m['name']}"
    if m["tags"]:
        line += f"  [{', '.join(m['tags'])}]"
    return line + ("  (retired)" if m["retired_at"] else "")


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
def show(state_dir: Path | None, as_json: bool, manifest_id: str) -> None:
    """One manifest's registry entry, pulls and recorded metadata (its statistics: ``card``)."""
    detail = _client(state_dir).get_json(f"/v1/manifests/{manifest_key(manifest_id)}")
    emit(detail, as_json, _describe_detail(detail))


def _describe_detail(m: dict[str, Any]) -> str:
    position = m["cdc_position"] or {}
    pulls = m["pulls"]
    lines = [
        f"manifest     {m['id']}",
        f"name         {m['name'] or '-'}",
        f"tags         {', '.join(m['tags']) or '-'}",
        f"description  {m['description'] or '-'}",
        f"rows         {m['rows']}  samples {m['samples']}  size {m['size_bytes']} bytes",
        f"created      {m['created_at']} by {m['author']}",
        f"retired      {m['retired_at'] or 'no'}",
        f"format       version {m['format_version']}",
        f"snapshot     {m['snapshot_id']}  cdc lsn {position.get('lsn_text') or '-'}",
        f"pulls        {pulls['count']}"
        + (
            f", last {pulls['last_at']} by {pulls['last_principal']}"
            + (f" for run {pulls['last_run']}" if pulls["last_run"] else "")
            if pulls["count"]
            else ""
        ),
        f"sample spec  {json.dumps(m['sample_spec'], sort_keys=True)}",
        "sql",
        *(f"  {line}" for line in str(m["sql"]).splitlines()),
    ]
    return "\n".join(lines)


@manifests.command()
@STATE_DIR
@JSON
@click.argument("a")
@click.argument("b")
def diff(state_dir: Path | None, as_json: bool, a: str, b: str) -> None:
    """What changed from manifest A (old) to manifest B (new): rows and samples side by side,
    the episodes added, removed and changed, and each changed metadata key (the SQL line by
    line, normalization as mean and std per dimension)."""
    settings = build_settings(state_dir)
    ids = [resolve_manifest(settings, ref) for ref in (a, b)]
    paths = [node_manifest(settings, manifest_id) for manifest_id in ids]
    result = diff_manifests(open_manifest(paths[0]), open_manifest(paths[1]))
    emit(result.to_dict(), as_json, describe_diff(ids[0], ids[1], result))


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
def rebuild(state_dir: Path | None, as_json: bool, manifest_id: str) -> None:
    """Rebuild a manifest at its pinned snapshot; say whether the bytes are identical."""
    path = f"/v1/manifests/{manifest_key(manifest_id)}/rebuild"
    result = _client(state_dir).post_json(path, {})
    verdict = "identical" if result["identical"] else f"DIFFERENT: {result['rebuilt_id']}"
    emit(
        result,
        as_json,
        f"rebuilt {result['manifest_id']} at snapshot {result['snapshot_id']}: {verdict}",
    )


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
@click.option(
    "--pipeline-below",
    type=click.IntRange(min=0),
    default=None,
    help="Only episodes stamped with a pipeline version below this (stale ones).",
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000)
def episodes(
    state_dir: Path | None,
    as_json: bool,
    manifest_id: str,
    pipeline_below: int | None,
    limit: int,
) -> None:
    """The episodes a manifest holds (or its stale ones), with stamps and status."""
    params: dict[str, Any] = {"limit": limit}
    if pipeline_below is not None:
        params["pipeline_version_below"] = pipeline_below
    page = _client(state_dir).get_json(
        f"/v1/manifests/{manifest_key(manifest_id)}/episodes", **params
    )
    lines = [
        f"{e['episode_id']}  pipeline {e['pipeline_version']}  {e['status']}" for e in page["items"]
    ]
    emit(page, as_json, "\n".join(lines) or "no episodes")


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
def card(state_dir: Path | None, as_json: bool, manifest_id: str) -> None:
    """A manifest's dataset card (Markdown): episodes, hours, robots, tasks and sites, success
    rate, quality flags, stamp ranges, normalization per dimension, SQL, snapshot, CDC
    position."""
    path = f"/v1/manifests/{manifest_key(manifest_id)}/card"
    client = _client(state_dir)
    if as_json:
        emit(client.get_json(path), True, "")
    else:
        click.echo(client.get_text(path, "text/markdown"), nl=False)


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
@click.option("--name", default=None, help="A new name.")
@click.option("--description", default=None, help="A new description.")
@click.option("--tag", "tags", multiple=True, help="Add a tag (repeatable).")
@click.option("--untag", "untags", multiple=True, help="Remove a tag (repeatable).")
@click.option(
    "--retire/--unretire",
    "retired",
    default=None,
    help="Retire (its file may be garbage-collected unless pulled, tagged or named), or undo.",
)
def edit(
    state_dir: Path | None,
    as_json: bool,
    manifest_id: str,
    name: str | None,
    description: str | None,
    tags: tuple[str, ...],
    untags: tuple[str, ...],
    retired: bool | None,
) -> None:
    """Change a manifest's registry entry (never its file, so never its ID)."""
    body: dict[str, Any] = {"add_tags": list(tags), "remove_tags": list(untags)}
    body |= {k: v for k, v in (("name", name), ("description", description)) if v is not None}
    if retired is not None:
        body["retired"] = retired
    entry = _client(state_dir).patch_json(f"/v1/manifests/{manifest_key(manifest_id)}", body)
    emit(entry, as_json, _describe_entry(entry))


@manifests.command()
@STATE_DIR
@JSON
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
def gc(state_dir: Path | None, as_json: bool, dry_run: bool) -> None:
    """Delete the service's unreferenced manifest files: those no registry row names (an hour
    after they were written) and retired manifests' files, except those a trainer pulled or
    a label (a tag or a name) points at; and the warehouse's lineage of manifests the
    registry never held (a registration that crashed between its two writes)."""
    report = _client(state_dir).post_json("/v1/manifests/gc", {"dry_run": dry_run})
    emit(report, as_json, _describe_gc(report))


def _describe_gc(report: dict[str, Any]) -> str:
    verb = "would delete" if report["dry_run"] else "deleted"
    lines = [
        f"{verb} {f['path']} ({f['reason']}, {f['size_bytes']} bytes)" for f in report["deleted"]
    ]
    lines += [f"kept {k['manifest_id']}: {k['detail']}" for k in report["kept"]]
    lines += [f"{verb} the lineage of unregistered {m}" for m in report.get("lineage", [])]
    lines.append(f"{verb} {len(report['deleted'])} files, {report['freed_bytes']} bytes")
    return "\n".join(lines)
