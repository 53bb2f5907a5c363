"""Dependencies shared by the routes, as ``Annotated`` aliases.

They are ``async`` so that they never wait for a worker thread: a request whose token is
cached is authenticated on the event loop, even while every worker thread is busy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.auth import Principal, TokenCache
from service.context import ServiceContext
from service.sink_auth import has_webhook_headers, verify_webhook
from service.tokens import Scope

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `quarry tokens create` (the CLI uses the local admin token), "
    "or a JWT from POST /v1/auth/authenticate.",
)
#: Who a valid Standard Webhooks signature speaks for (``POST /v1/cdc/debezium`` only).
WEBHOOK_PRINCIPAL = Principal("debezium-webhook", frozenset({Scope.ADMIN}))


def bearer_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or of ``Bearer: <token>`` as
    Debezium's JWT authenticator writes it; ``None`` without one."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() not in ("bearer", "bearer:"):
        return None
    return value.strip() or None


async def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


Context = Annotated[ServiceContext, Depends(get_context)]


def _requires(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        tokens: TokenCache = request.app.state.tokens
        principal = await tokens.authenticate(bearer_token(request))
        principal.require(scope)
        return principal

    return dependency


async def _debezium_sink(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """An admin token or JWT, or a valid Standard Webhooks signature of the body."""
    if bearer_token(request) is None and has_webhook_headers(request.headers):
        context: ServiceContext = request.app.state.context
        body = await request.body()  # kept by Starlette for the route
        verify_webhook(context.settings.service.webhook_secret, body, request.headers)
        return WEBHOOK_PRINCIPAL
    tokens: TokenCache = request.app.state.tokens
    principal = await tokens.authenticate(bearer_token(request))
    principal.require(Scope.ADMIN)
    return principal


Reader = Annotated[Principal, Depends(_requires(Scope.READ))]
Curator = Annotated[Principal, Depends(_requires(Scope.CURATE))]
Admin = Annotated[Principal, Depends(_requires(Scope.ADMIN))]
DebeziumSink = Annotated[Principal, Depends(_debezium_sink)]
