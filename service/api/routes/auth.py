"""The JWT token endpoints Debezium Server's JWT authenticator calls (``service/sink_auth.py``).

Set ``debezium.sink.http.authentication.jwt.url`` to the service's ``/v1/`` URL (Debezium
appends ``auth/authenticate`` and ``auth/refreshToken``), ``jwt.username`` to a Quarry token's
name and ``jwt.password`` to the token. Bodies and answers use Debezium's snake_case names.
"""

from __future__ import annotations

import psycopg
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, SecretStr
from starlette.concurrency import run_in_threadpool

from service.api.deps import Context
from service.api.problems import problem_responses
from service.auth import TokenCache, lookup_digest
from service.context import ServiceContext
from service.errors import DatabaseUnavailableError, NotFoundError, UnauthorizedError
from service.sink_auth import JwtIssuer
from service.tokens import digest

router = APIRouter(prefix="/v1/auth", tags=["auth"])


class Credentials(BaseModel):
    """Debezium's ``JWTAuthorizationInitialRequest``."""

    username: str = Field(min_length=1, description="the Quarry token's name")
    password: SecretStr = Field(description="the Quarry token")
    token_expiry_in_minutes: int = Field(default=60, ge=1)
    refresh_token_expiry_in_minutes: int = Field(default=1440, ge=1)


class Refresh(BaseModel):
    """Debezium's ``JWTAuthorizationRefreshRequest``."""

    jwt_refresh_token: SecretStr
    token_expiry_in_minutes: int = Field(default=60, ge=1)
    refresh_token_expiry_in_minutes: int = Field(default=1440, ge=1)


class GrantBody(BaseModel):
    """Debezium's ``JWTAuthorizationResponse``: times in milliseconds."""

    jwt: str
    jwt_refresh_token: str
    expires_in: int
    refresh_token_expires_in: int


class JwtDisabledError(NotFoundError):
    """The service has no JWT secret."""

    title = "JWT authentication is not configured"


@router.post("/authenticate", responses=problem_responses(401, 404))
async def authenticate(body: Credentials, request: Request, context: Context) -> GrantBody:
    """A JWT and a refresh token for a Quarry token (the password) and its name (the
    username); 401 when the token is unknown, revoked or not of that name."""
    issuer = _issuer(request)
    token_digest = digest(body.password.get_secret_value())
    await _check(context, token_digest, body.username)
    grant = issuer.grant(
        body.username,
        token_digest,
        body.token_expiry_in_minutes,
        body.refresh_token_expiry_in_minutes,
    )
    return GrantBody(**grant.__dict__)


@router.post("/refreshToken", responses=problem_responses(401, 404))
async def refresh_token(body: Refresh, request: Request, context: Context) -> GrantBody:
    """A new JWT pair for a valid refresh token whose Quarry token is still live."""
    issuer = _issuer(request)
    token_digest = issuer.digest_of(body.jwt_refresh_token.get_secret_value(), "refresh")
    name = await _check(context, token_digest, None)
    grant = issuer.grant(
        name, token_digest, body.token_expiry_in_minutes, body.refresh_token_expiry_in_minutes
    )
    return GrantBody(**grant.__dict__)


def _issuer(request: Request) -> JwtIssuer:
    tokens: TokenCache = request.app.state.tokens
    if tokens.jwt is None:
        raise JwtDisabledError(
            "this service issues no JWTs: set QUARRY_SERVICE__JWT_SECRET (32 characters at "
            "least, the same on every replica)"
        )
    return tokens.jwt


async def _check(context: ServiceContext, token_digest: str, name: str | None) -> str:
    """The name of the live token ``token_digest``; 401 when there is none, or when its name
    is not ``name``."""

    def lookup() -> str | None:
        try:
            with context.connect() as conn:
                principal = lookup_digest(conn, token_digest)
        except psycopg.OperationalError as error:
            raise DatabaseUnavailableError(
                f"cannot check the token: the operational database is unavailable ({error})",
                part="postgres",
            ) from error
        return None if principal is None else principal.name

    found = await run_in_threadpool(lookup)
    if found is None or (name is not None and found != name):
        raise UnauthorizedError(
            "unknown or revoked token, or not of that username (the username is the token's "
            "name, the password the token)",
            error="invalid_token",
        )
    return found
