"""``quarry curate``: a curation (SQL or filters) into a named, tagged manifest, through the
running service (the ``quarry manifests`` group is :mod:`quarry.commands.manifests`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from quarry.client import ServiceClient
from quarry.commands._common import JSON, PARAMS, STATE_DIR, build_settings, emit
from quarry.commands.manifests import manifests


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
@click.option("--name", default=None, help="The manifest's name (kept in the registry).")
@click.option("--tag", "tags", multiple=True, help="A tag for the manifest (repeatable).")
@click.option("--description", default=None, help="What the manifest is for.")
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Register a manifest without a sample instead of refusing the curation.",
)
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
    name: str | None,
    tags: tuple[str, ...],
    description: str | None,
    allow_empty: bool,
) -> None:
    """Build a manifest from a curation (SQL or filters); print its ID, rows and samples.

    A curation that matches nothing (or no slice long enough for a sample) is refused,
    naming the warehouse snapshot it read, unless --allow-empty.
    """
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
    annotation = {"name": name, "tags": list(tags), "description": description}
    body |= {k: v for k, v in annotation.items() if v}
    if allow_empty:
        body["allow_empty"] = True
    result = client.post_json("/v1/curations", body)
    emit(result, as_json, _describe_result(result))


def _describe_result(result: dict[str, Any]) -> str:
    reused = " (reused)" if result["reused"] else ""
    lines = [f"manifest {result['manifest_id']}{reused}"]
    if result["name"]:
        lines.append(f"name     {result['name']}")
    if result["tags"]:
        lines.append(f"tags     {', '.join(result['tags'])}")
    lines += [f"rows     {result['rows']}", f"samples  {result['samples']}"]
    return "\n".join(lines)


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


def register(group: click.Group) -> None:
    group.add_command(curate)
    group.add_command(manifests)
