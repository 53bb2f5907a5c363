"""``quarry up | down | status | serve``."""

from __future__ import annotations

import errno
from pathlib import Path

import click

from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.errors import StackError
from quarry.stack.lifecycle import Stack, StackStatus


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
def up(state_dir: Path | None, as_json: bool) -> None:
    """Start the embedded stack (Postgres, warehouse, CDC, service) in the background."""
    status = Stack(build_settings(state_dir)).up()
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
def serve(state_dir: Path | None, host: str | None, port: int | None) -> None:
    """Run the HTTP service in the foreground (``up`` runs it in the background)."""
    from service.server import serve as run_server

    settings = build_settings(state_dir)
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


def register(group: click.Group) -> None:
    for command in (up, down, status, serve):
        group.add_command(command)
