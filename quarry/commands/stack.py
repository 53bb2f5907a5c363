"""``quarry up | down | status | serve | migrate``."""

from __future__ import annotations

import errno
from pathlib import Path

import click

from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.errors import ConfigError, StackError
from quarry.stack.lifecycle import Stack, StackStatus, check_stack_backend
from quarry.stack.migrations import apply_migrations


def _describe(status: StackStatus) -> str:
    lines = [f"state dir   {status.state_dir}", f"service url {status.service_url or '-'}"]
    for name, part in status.parts.items():
        label = "STALLED" if part.detail.get("state") == "stalled" else "DOWN"
        error = part.detail.get("error", "unhealthy")
        mark = "healthy" if part.healthy else f"{label} ({error})"
        lines.append(f"{name:<11} {mark}")
        if not part.healthy and part.detail.get("log"):
            lines.append(f"{'':<11} see {part.detail['log']}")
    return "\n".join(lines)


@click.command()
@STATE_DIR
@JSON
@click.option(
    "--external",
    is_flag=True,
    help="Run the service and the CDC follower against the Postgres and S3 the settings "
    "address (QUARRY_SOURCE_DSN, QUARRY_WAREHOUSE__..., QUARRY_MANIFESTS__URL), with no "
    "embedded Postgres; the state folder keeps only logs, the URL and the admin token.",
)
def up(state_dir: Path | None, as_json: bool, external: bool) -> None:
    """Start the embedded stack (Postgres, warehouse, CDC, service, a pipeline worker) in
    the background."""
    status = Stack(build_settings(state_dir)).up(external=external)
    emit(status.to_dict(), as_json, _describe(status))
    if not status.healthy:
        raise SystemExit(3)


@click.command()
@STATE_DIR
def down(state_dir: Path | None) -> None:
    """Stop the embedded stack; every byte of state is kept."""
    Stack(build_settings(state_dir)).down()
    click.echo("stopped")


@click.command()
@STATE_DIR
@JSON
def status(state_dir: Path | None, as_json: bool) -> None:
    """Report the health of each part of the stack and the service URL."""
    result = Stack(build_settings(state_dir)).status()
    emit(result.to_dict(), as_json, _describe(result))
    if not result.healthy:
        raise SystemExit(3)


@click.command()
@STATE_DIR
@click.option("--host", default=None, help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to bind (default: a free one).")
@click.option(
    "--source",
    type=click.Choice(["pgoutput", "debezium"]),
    default=None,
    help="What feeds the warehouse (default $QUARRY_CDC__SOURCE, else pgoutput): Quarry's "
    "follower, or Debezium Server posting to POST /v1/cdc/debezium (no follower runs).",
)
def serve(state_dir: Path | None, host: str | None, port: int | None, source: str | None) -> None:
    """Run the HTTP service in the foreground (``up`` runs it in the background)."""
    from service.server import serve as run_server

    settings = build_settings(state_dir)
    if source is not None:
        settings.cdc = settings.cdc.model_copy(update={"source": source})
    if host is not None:
        settings.service.host = host
    if port is not None:
        settings.service.port = port
    try:
        run_server(settings.service_settings())
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        where = f"{settings.service.host}:{settings.service.port}"
        raise StackError(
            f"port {where} is taken; pick another with --port or QUARRY_SERVICE__PORT "
            "(0, the default, takes the service's last port or any free one)"
        ) from None


@click.command()
@STATE_DIR
def migrate(state_dir: Path | None) -> None:
    """Apply Quarry's migrations to the operational database (forward only) and create or
    upgrade the warehouse's tables, carrying lineage that an upgrade set aside over to the
    warehouse: the one-shot step of a deployment whose Postgres and
    warehouse are not the embedded stack's (QUARRY_SOURCE_DSN, QUARRY_WAREHOUSE__...)."""
    import psycopg

    from curation.lineage import carry_over_lineage
    from warehouse.backends import open_warehouse

    settings = build_settings(state_dir)
    if settings.source_dsn is None:
        raise ConfigError(
            "set QUARRY_SOURCE_DSN to the operational database (`quarry up` migrates the "
            "embedded one itself)"
        )
    config = settings.warehouse_config()
    check_stack_backend(config)
    applied = apply_migrations(settings.operational_dsn(), settings.sql_dir / "postgres")
    with (
        open_warehouse(config) as warehouse,
        psycopg.connect(settings.operational_dsn()) as conn,
    ):
        warehouse.bootstrap()
        carried = carry_over_lineage(conn, warehouse)
    click.echo(
        f"migrations applied: {len(applied)}; lineage carried over: {carried} manifests; "
        f"warehouse ready ({config.backend})"
    )


def register(group: click.Group) -> None:
    for command in (up, down, status, serve, migrate):
        group.add_command(command)
