"""``quarry curate`` and ``quarry manifests list | show | diff``: through the running service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from manifests.diff import diff_manifests
from manifests.manifest import open_manifest
from quarry.client import ServiceClient, node_manifest
from quarry.commands._common import JSON, PARAMS, STATE_DIR, build_settings, emit


@click.command()
@STATE_DIR
@JSON
@click.option("--sql", "sql", help="Curation SQL over the curation views.")
@click.option(
    "--sql-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the curation SQL from a file (e.g. sql/curations/*.sql).",
)
@PARAMS
@click.option(
    "--filters",
    "filters_json",
    help='Structured filters as JSON, e.g. \'{"tasks": ["pick_cube"], "success": true}\'.',
)
@click.option(
    "--filters-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the structured filters (JSON) from a file.",
)
@click.option(
    "--sample-spec",
    "spec_json",
    default=None,
    help="Sample spec as JSON, e.g. '{\"action_horizon\": 16}'.",
)
@click.option("--preview", is_flag=True, help="Counts, hours and samples only; build nothing.")
def curate(
    state_dir: Path | None,
    as_json: bool,
    sql: str | None,
    sql_file: Path | None,
    params: dict[str, str],
    filters_json: str | None,
    filters_file: Path | None,
    spec_json: str | None,
    preview: bool,
) -> None:
    """Build a manifest from a curation (SQL or filters); print its ID, rows and samples."""
    body = _curation_body(sql, sql_file, filters_json, filters_file)
    if params:
        if "sql" not in body:
            raise click.UsageError("--param fills placeholders of --sql or --sql-file")
        body["params"] = params
    if spec_json is not None:
        body["sample_spec"] = _json_option(spec_json, "--sample-spec")
    client = ServiceClient.for_state(build_settings(state_dir))
    if preview:
        seen = client.post_json("/v1/curations/preview", body)
        emit(seen, as_json, _describe_preview(seen))
        return
    result = client.post_json("/v1/curations", body)
    reused = " (reused)" if result["reused"] else ""
    emit(
        result,
        as_json,
        f"manifest {result['manifest_id']}{reused}\n"
        f"rows     {result['rows']}\nsamples  {result['samples']}",
    )


def _curation_body(
    sql: str | None, sql_file: Path | None, filters_json: str | None, filters_file: Path | None
) -> dict[str, Any]:
    given = [v for v in (sql, sql_file, filters_json, filters_file) if v is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --sql, --sql-file, --filters, --filters-file")
    if sql is not None or sql_file is not None:
        return {"sql": sql if sql is not None else sql_file.read_text()}  # type: ignore[union-attr]
    if filters_file is not None:
        return {"filters": _json_option(filters_file.read_text(), "--filters-file")}
    return {"filters": _json_option(str(filters_json), "--filters")}


def _json_option(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint=option) from None


def _describe_preview(seen: dict[str, Any]) -> str:
    lines = [f"{'robot':<12} {'task':<20} {'episodes':>8} {'hours':>8} {'samples':>10}"]
    for g in seen["groups"]:
        lines.append(
            f"{g['robot_id']:<12} {g['task_id']:<20} {g['episodes']:>8} "
            f"{g['hours']:>8.3f} {g['samples']:>10}"
        )
    t = seen["totals"]
    lines.append(f"{'total':<33} {t['episodes']:>8} {t['hours']:>8.3f} {t['samples']:>10}")
    return "\n".join(lines)


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
    settings = build_settings(state_dir)
    paths = [node_manifest(settings, manifest_id) for manifest_id in (a, b)]
    result = diff_manifests(open_manifest(paths[0]), open_manifest(paths[1]))
    payload = result.to_dict()
    emit(payload, as_json, _describe_diff(payload))


@manifests.command()
@STATE_DIR
@JSON
@click.argument("manifest_id")
def rebuild(state_dir: Path | None, as_json: bool, manifest_id: str) -> None:
    """Rebuild a manifest at its pinned snapshot; say whether the bytes are identical."""
    client = ServiceClient.for_state(build_settings(state_dir))
    result = client.post_json(f"/v1/manifests/{manifest_id}/rebuild", {})
    verdict = "identical" if result["identical"] else f"DIFFERENT: {result['rebuilt_id']}"
    emit(result, as_json, f"rebuilt {manifest_id} at snapshot {result['snapshot_id']}: {verdict}")


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
    page = ServiceClient.for_state(build_settings(state_dir)).get_json(
        f"/v1/manifests/{manifest_id}/episodes", **params
    )
    lines = [
        f"{e['episode_id']}  pipeline {e['pipeline_version']}  {e['status']}" for e in page["items"]
    ]
    emit(page, as_json, "\n".join(lines) or "no episodes")


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
