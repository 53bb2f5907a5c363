"""Request body size limit, enforced while the body is received.

A body larger than the limit is refused with 413 before it is read: at once when its
``Content-Length`` says so (a client that sent ``Expect: 100-continue`` never uploads it),
else as soon as the bytes received pass the limit. The refusal is an ``HTTPException``
raised from ``receive`` inside the route, so the app's one exception handler renders it as a
problem document. (Starlette's own body limit answers in plain text.)
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimitMiddleware:
    """Refuses request bodies over ``max_bytes`` (or the limit of the longest matching path
    prefix in ``limits``) with 413."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, limits: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = dict(sorted((limits or {}).items(), key=lambda item: -len(item[0])))

    def limit_for(self, path: str) -> int:
        for prefix, limit in self.limits.items():
            if path.startswith(prefix):
                return limit
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = _content_length(scope)
        received = 0

        async def limited() -> Message:
            nonlocal received
            if declared is not None and declared > limit:
                raise _too_large(declared, limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(received, limit)
            return message

        await self.app(scope, limited, send)


def _too_large(size: int, limit: int) -> HTTPException:
    return HTTPException(
        413, f"the request body is {size} bytes or more; this route accepts at most {limit}"
    )


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
