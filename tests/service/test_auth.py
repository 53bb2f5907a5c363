"""Bearer tokens: the `quarry tokens` commands, scopes, 401/403 problems with their
challenges, the lookup cache and how fast a revocation takes effect."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from quarry.stack.lifecycle import Stack
from service.auth import Principal, TokenCache
from service.errors import DatabaseUnavailableError, ForbiddenError, UnauthorizedError
from service.tokens import Scope, digest, ensure_admin_token, issue_token, revoke_token
from tests.fixtures.stack import run_json, run_quarry

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def url(stack: Stack) -> str:
    found = stack.status().service_url
    assert found is not None
    return found


def create(stack: Stack, *args: str) -> str:
    """A new token from the real CLI: the last line it prints."""
    out = run_quarry(stack.paths.root, "tokens", "create", *args).stdout
    return out.strip().splitlines()[-1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_read_token_reads_but_may_not_curate(stack: Stack, url: str) -> None:
    token = create(stack, "--scope", "read")
    with httpx.Client(base_url=url, headers=bearer(token), timeout=30) as client:
        assert client.get("/v1/manifests").status_code == 200
        assert client.post("/v1/sql", json={"sql": "SELECT 1 AS one"}).status_code == 200
        refused = client.post("/v1/curations", json={"sql": "SELECT * FROM episodes"})
    assert refused.status_code == 403
    assert refused.headers["content-type"] == PROBLEM
    assert refused.json()["scope"] == "curate"
    assert refused.headers["www-authenticate"] == (
        'Bearer realm="quarry", error="insufficient_scope", scope="curate"'
    )


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        (None, 'Bearer realm="quarry"'),
        ("Basic dXNlcjpwYXNz", 'Bearer realm="quarry"'),
        ("Bearer", 'Bearer realm="quarry"'),
        ("Bearer qry_not-a-token", 'Bearer realm="quarry", error="invalid_token"'),
    ],
)
def test_missing_or_bad_token_is_401_with_a_challenge(
    url: str, authorization: str | None, challenge: str
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = httpx.get(f"{url}/v1/manifests", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"] == challenge
    assert response.json()["status"] == 401


def test_token_lifecycle_through_the_cli(stack: Stack, url: str) -> None:
    created = run_json(stack.paths.root, "tokens", "create", "--scope", "curate", "--name", "bob")
    token, token_id = created["token"], created["id"]
    assert token.startswith("qry_") and created["scopes"] == ["curate"]
    listed = run_json(stack.paths.root, "tokens", "list")["tokens"]
    assert [t["scopes"] for t in listed if t["id"] == token_id] == [["curate"]]
    assert token not in str(listed) and digest(token) not in str(listed)
    assert httpx.get(f"{url}/v1/manifests", headers=bearer(token)).status_code == 200

    assert run_json(stack.paths.root, "tokens", "revoke", str(token_id))["revoked_at"]
    started = time.monotonic()
    deadline = started + stack.settings.service.token_cache_s + 2
    while httpx.get(f"{url}/v1/manifests", headers=bearer(token)).status_code == 200:
        assert time.monotonic() < deadline, "the revoked token still works"
        time.sleep(0.2)
    listed = run_json(stack.paths.root, "tokens", "list", "--all")["tokens"]
    assert [bool(t["revoked_at"]) for t in listed if t["id"] == token_id] == [True]


def test_revoking_an_unknown_token_fails(stack: Stack) -> None:
    result = run_quarry(stack.paths.root, "tokens", "revoke", "987654321", check=False)
    assert result.returncode == 4
    assert "no token with ID 987654321" in result.stderr


def test_scopes_imply_the_lesser_ones() -> None:
    admin = Principal("a", frozenset({Scope.ADMIN}))
    for scope in Scope:
        admin.require(scope)
    curator = Principal("c", frozenset({Scope.CURATE}))
    curator.require(Scope.READ)
    with pytest.raises(ForbiddenError):
        curator.require(Scope.ADMIN)
    with pytest.raises(ForbiddenError):
        Principal("none", frozenset()).require(Scope.READ)


class CountingConnect:
    """Opens real connections and counts them."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.count = 0

    def __call__(self) -> psycopg.Connection[Any]:
        self.count += 1
        return psycopg.connect(self.dsn, autocommit=True)


@pytest.fixture
def conn(stack: Stack) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(stack.settings.operational_dsn(), autocommit=True) as connection:
        yield connection


def test_cache_answers_known_tokens_without_the_database(
    stack: Stack, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    connect = CountingConnect(stack.settings.operational_dsn())
    cache = TokenCache(connect, ttl_s=0.5)
    info, token = issue_token(conn, "cached", [Scope.READ])

    async def scenario() -> None:
        for _ in range(20):
            assert (await cache.authenticate(token)).name == "cached"
        assert connect.count == 1
        revoke_token(conn, info.id)
        assert (await cache.authenticate(token)).name == "cached"  # still within the TTL
        await anyio.sleep(0.6)
        with pytest.raises(UnauthorizedError):
            await cache.authenticate(token)

    anyio.run(scenario)


def test_unknown_tokens_are_not_cached(
    stack: Stack, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    cache = TokenCache(CountingConnect(stack.settings.operational_dsn()), ttl_s=60)
    token = "qry_" + "x" * 43

    async def scenario() -> None:
        with pytest.raises(UnauthorizedError):
            await cache.authenticate(token)
        conn.execute(
            "INSERT INTO api_tokens (name, token_sha256, scopes) VALUES (%s, %s, %s)",
            ("late", digest(token), ["read"]),
        )
        assert (await cache.authenticate(token)).name == "late"

    anyio.run(scenario)


def test_unreachable_database_is_a_retryable_503(tmp_path: Path) -> None:
    dsn = f"host={tmp_path} dbname=none connect_timeout=1"
    cache = TokenCache(lambda: psycopg.connect(dsn), ttl_s=5)
    with pytest.raises(DatabaseUnavailableError) as raised:
        anyio.run(cache.authenticate, "qry_anything")
    assert raised.value.status == 503 and raised.value.retryable


def test_revoked_admin_token_is_rotated(
    conn: psycopg.Connection[tuple[object, ...]], tmp_path: Path
) -> None:
    path = tmp_path / "admin.token"
    first = ensure_admin_token(conn, path)
    assert ensure_admin_token(conn, path) == first
    conn.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = %s", (digest(first),)
    )
    second = ensure_admin_token(conn, path)
    assert second != first and path.read_text().strip() == second
    assert oct(path.stat().st_mode & 0o777) == "0o600"
