"""The curation runtime of the app (build pools, interruptible reader, job runner), made on
first use and shared by the curation, manifest and episode routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.context import ServiceContext
from service.runtime import CurationRuntime


async def get_runtime(request: Request) -> CurationRuntime:
    """The app's :class:`CurationRuntime`, created on the first request that needs one (on
    the event loop, so no two requests create one; creating connects to nothing)."""
    state = request.app.state
    runtime: CurationRuntime | None = getattr(state, "curation_runtime", None)
    if runtime is None:
        context: ServiceContext = state.context
        runtime = CurationRuntime(context.settings, context.warehouse(), context.connect)
        state.curation_runtime = runtime
    return runtime


Runtime = Annotated[CurationRuntime, Depends(get_runtime)]
