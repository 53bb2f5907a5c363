"""``quarry tokens create | list | revoke``: API tokens, managed in the operational database.

The commands connect to Postgres directly (``settings.operational_dsn()``), as the owner of
the state folder: they work while the service is down and need no token themselves. The
service trusts a token lookup for ``service.token_cache_s`` seconds (5 by default), so a
revocation takes effect within that time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import psycopg

from quarry.commands._common import JSON, STATE_DIR, build_settings, emit
from quarry.errors import NotFoundError, StackError
from quarry.settings import Settings
from service.tokens import LOCAL_ADMIN, Scope, issue_token, list_tokens, revoke_token


@click.group()
def tokens() -> None:
    """Bearer tokens for the HTTP API (scopes: read < curate < admin)."""


@tokens.command()
@STATE_DIR
@JSON
@click.option(
    "--scope",
    type=click.Choice([str(scope) for scope in Scope]),
    default=str(Scope.READ),
    show_default=True,
    help="What the token may do; each scope includes the ones before it.",
)
@click.option("--name", default=None, help="Who or what uses it (default: cli-<scope>).")
def create(state_dir: Path | None, as_json: bool, scope: str, name: str | None) -> None:
    """Create a token and print it on the last line (it is shown only once)."""
    settings = build_settings(state_dir)
    with _connect(settings) as conn:
        info, secret = issue_token(conn, name or f"cli-{scope}", [Scope(scope)])
    text = f"token {info.id} ({info.name}, scope {scope}); store it now, it is not shown again:"
    emit({**info.to_dict(), "token": secret}, as_json, f"{text}\n{secret}")


@tokens.command(name="list")
@STATE_DIR
@JSON
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked tokens.")
def list_(state_dir: Path | None, as_json: bool, include_revoked: bool) -> None:
    """Registered tokens (never their secrets)."""
    with _connect(build_settings(state_dir)) as conn:
        found = list_tokens(conn, include_revoked=include_revoked)
    lines = [f"{'id':>5}  {'name':<24} {'scopes':<18} {'created':<25} revoked"]
    for info in found:
        scopes = ",".join(info.scopes)
        revoked = info.revoked_at.isoformat(timespec="seconds") if info.revoked_at else "-"
        created = info.created_at.isoformat(timespec="seconds")
        lines.append(f"{info.id:>5}  {info.name:<24} {scopes:<18} {created:<25} {revoked}")
    emit({"tokens": [info.to_dict() for info in found]}, as_json, "\n".join(lines))


@tokens.command()
@STATE_DIR
@JSON
@click.argument("token_id", type=int)
def revoke(state_dir: Path | None, as_json: bool, token_id: int) -> None:
    """Revoke token TOKEN_ID (see `quarry tokens list`). The service stops accepting it
    within its token cache time (5 s by default)."""
    settings = build_settings(state_dir)
    with _connect(settings) as conn:
        info = revoke_token(conn, token_id)
    if info is None:
        raise NotFoundError(f"no token with ID {token_id}", token_id=token_id)
    text = (
        f"revoked token {info.id} ({info.name}); the service refuses it within "
        f"{settings.service.token_cache_s:g} s"
    )
    if info.name == LOCAL_ADMIN:
        text += "\nthis was a local admin token: `quarry up` issues a new one for the CLI"
    emit(info.to_dict(), as_json, text)


@contextmanager
def _connect(settings: Settings) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    try:
        conn = psycopg.connect(settings.operational_dsn(), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        raise StackError(
            f"cannot reach the operational database; is the stack up? ({error})",
            part="postgres",
        ) from error
    with conn:
        yield conn


def register(group: click.Group) -> None:
    group.add_command(tokens)
