"""``quarry curate`` and ``quarry manifests list | show | diff``: through the running service."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from manifests.diff import diff_manifests
from manifests.manifest import open_manifest
from service.client import ServiceClient
from service.commands._common import JSON, STATE_DIR, build_settings, emit


@click.command()
@STATE_DIR
@JSON
@click.option("--sql", "sql", help="Curation SQL over the curation views.")
@click.option(
    "--sql-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the curation SQL from a file (e.g. sql/curations/*.sql).",
)
@click.option(
    "--sample-spec",
    "spec_json",
    default=None,
    help="Sample spec as JSON, e.g. '{\"action_horizon\": 16}'.",
)
def curate(
    state_dir: Path | None,
    as_json: bool,
    sql: str | None,
    sql_file: Path | None,
    spec_json: str | None,
) -> None:
    """Build a manifest from a curation query; print its ID, rows and samples."""
    if (sql is None) == (sql_file is None):
        raise click.UsageError("give exactly one of --sql and --sql-file")
    query = sql if sql is not None else sql_file.read_text()  # type: ignore[union-attr]
    body: dict[str, Any] = {"sql": query}
    if spec_json is not None:
        try:
            body["sample_spec"] = json.loads(spec_json)
        except json.JSONDecodeError as error:
            raise click.BadParameter(f"not JSON: {error}", param_hint="--sample-spec") from None
    result = ServiceClient.for_state(build_settings(state_dir)).post_json("/v1/curations", body)
    reused = " (reused)" if result["reused"] else ""
    emit(
        result,
        as_json,
        f"manifest {result['manifest_id']}{reused}\n"
        f"rows     {result['rows']}\nsamples  {result['samples']}",
    )


@click.group()
def manifests() -> None:
    """Inspect the manifest registry."""


@manifests.command("list")
@STATE_DIR
@JSON
@click.option("--limit", type=click.IntRange(1, 1000), default=50)
def list_(state_dir: Path | None, as_json: bool, limit: int) -> None:
    """Registered manifests, newest first."""
    page = ServiceClient.for_state(build_settings(state_dir)).get_json("/v1/manifests", limit=limit)
    lines = [
        f"{m['id'][:16]}  {m['rows']:>8} rows  {m['samples']:>10} samples  "
        f"{m['created_at']}  {m['author']}"
        for m in page["items"]
    ]
    emit(page, as_json, "\n".join(lines) or "no manifests")


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
def show(state_dir: Path | None, as_json: bool, manifest_id: str) -> None:
    """One manifest's registry entry and recorded metadata."""
    detail = ServiceClient.for_state(build_settings(state_dir)).get_json(
        f"/v1/manifests/{manifest_id}"
    )
    emit(detail, as_json, json.dumps(detail, indent=2, default=str))


@manifests.command()
@STATE_DIR
@JSON
@click.argument("a")
@click.argument("b")
def diff(state_dir: Path | None, as_json: bool, a: str, b: str) -> None:
    """What changed from manifest A to manifest B: episodes and metadata."""
    client = ServiceClient.for_state(build_settings(state_dir))
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for manifest_id in (a, b):
            path = Path(folder) / f"{manifest_id}.arrow"
            client.download(f"/v1/manifests/{manifest_id}/arrow", path)
            paths.append(path)
        result = diff_manifests(open_manifest(paths[0]), open_manifest(paths[1]))
    payload = result.to_dict()
    emit(payload, as_json, _describe_diff(payload))


def _describe_diff(diff: dict[str, Any]) -> str:
    lines = [
        f"rows     {diff['rows']['a']} -> {diff['rows']['b']}",
        f"samples  {diff['samples']['a']} -> {diff['samples']['b']}",
        f"episodes +{len(diff['added'])} -{len(diff['removed'])} "
        f"~{len(diff['changed'])} ={diff['unchanged']}",
    ]
    lines += [
        f"metadata {key}: {change['a']!r} -> {change['b']!r}"
        for key, change in diff["metadata"].items()
    ]
    return "\n".join(lines)


def register(group: click.Group) -> None:
    group.add_command(curate)
    group.add_command(manifests)
