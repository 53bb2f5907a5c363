"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Request

from service.auth import Principal, authenticate
from service.context import ServiceContext
from service.tokens import Scope


def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


Context = Annotated[ServiceContext, Depends(get_context)]


def _requires(scope: Scope) -> Callable[..., Principal]:
    def dependency(
        context: Context, authorization: Annotated[str | None, Header()] = None
    ) -> Principal:
        with context.connect() as conn:
            principal = authenticate(conn, authorization)
        principal.require(scope)
        return principal

    return dependency


Reader = Annotated[Principal, Depends(_requires(Scope.READ))]
Curator = Annotated[Principal, Depends(_requires(Scope.CURATE))]
Admin = Annotated[Principal, Depends(_requires(Scope.ADMIN))]
