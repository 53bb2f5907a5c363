"""``quarry sql "SELECT ..."``: a read-only query over the curation views (``POST /v1/sql``),
printed as a table, as the API's JSON document, or written as an Arrow IPC stream."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from quarry.client import ServiceClient
from quarry.commands._common import STATE_DIR, build_settings, table
from quarry.errors import BadInputError
from service.api.encoding import ARROW_STREAM, SNAPSHOT_HEADER


@click.command()
@STATE_DIR
@click.argument("query", metavar='"SELECT ..."')
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "arrow"]),
    default="table",
    show_default=True,
    help="A table to read, the API's JSON document, or an Arrow IPC stream (exact types).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write the result to this file instead of stdout.",
)
@click.option("--snapshot", "snapshot_id", type=click.IntRange(0), help="Read this snapshot.")
@click.option("--max-rows", type=click.IntRange(1), help="Refuse (exit 2) past this many rows.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    help="Stop the query after this many seconds (exit 2).",
)
def sql(
    state_dir: Path | None,
    query: str,
    fmt: str,
    out: Path | None,
    **limits: Any,
) -> None:
    """Run one read-only SELECT over the curation views (the same guard as curations)."""
    if fmt == "arrow" and out is None and sys.stdout.isatty():
        raise BadInputError("an Arrow IPC stream is binary: give --out FILE or redirect stdout")
    body = {"sql": query, **{k: v for k, v in limits.items() if v is not None}}
    client = ServiceClient.for_state(build_settings(state_dir))
    if fmt == "arrow":
        response = client.post("/v1/sql", body, accept=ARROW_STREAM)
        _write(response.content, out)
        if out is not None:
            snapshot = response.headers.get(SNAPSHOT_HEADER)
            click.echo(f"{len(response.content)} bytes of Arrow IPC at snapshot {snapshot}: {out}")
        return
    result = client.post_json("/v1/sql", body)
    text = json.dumps(result, indent=2) if fmt == "json" else _describe(result)
    _write((text + "\n").encode(), out)


def _describe(result: dict[str, Any]) -> str:
    headers = [column["name"] for column in result["columns"]]
    count = result["row_count"]
    footer = f"({count} row{'' if count == 1 else 's'}, snapshot {result['snapshot_id']})"
    return (table(headers, result["rows"]) + "\n" if headers else "") + footer


def _write(data: bytes, out: Path | None) -> None:
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    partial = out.with_name(f".{out.name}.partial")
    partial.write_bytes(data)
    partial.replace(out)  # a reader never sees half a result


def register(group: click.Group) -> None:
    group.add_command(sql)
