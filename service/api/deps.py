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
from service.tokens import Scope

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `quarry tokens create` (the CLI uses the local admin token).",
)


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
        principal = await tokens.authenticate(credentials.credentials if credentials else None)
        principal.require(scope)
        return principal

    return dependency


Reader = Annotated[Principal, Depends(_requires(Scope.READ))]
Curator = Annotated[Principal, Depends(_requires(Scope.CURATE))]
Admin = Annotated[Principal, Depends(_requires(Scope.ADMIN))]
