"""Problem documents (RFC 9457) in the OpenAPI description.

Every error the service answers is ``application/problem+json`` (see ``service/app.py``).
Routes list their own problem statuses with :func:`problem_responses`;
:func:`document_problems` adds what every route shares: 401/403/503 on routes that need a
token, 400/413 on routes with a body, and the problem form of FastAPI's 422 validation answer.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

PROBLEM_JSON = "application/problem+json"
_REF = "#/components/schemas/"

_DESCRIPTIONS = {
    400: "The request was refused; `reason` says why (e.g. `ambiguous_manifest_id`, with "
    "`candidates`)",
    401: "No valid bearer token (see `WWW-Authenticate`)",
    403: "The token lacks the scope this route needs",
    404: "No such object",
    408: "The query ran past its time limit and was stopped",
    413: "The request body is larger than the service accepts",
    422: "The request is well formed but cannot be served (see `errors` or `detail`)",
    409: "The request conflicts with the current state (a finished job, another source, a "
    "warehouse too far behind the source)",
    503: "A part the service needs is unavailable; retry later",
}


class Problem(BaseModel):
    """An error, as RFC 9457 describes it; routes add scalar members such as ``reason``."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", examples=["about:blank"])
    title: str = Field(examples=["Curation refused"])
    status: int = Field(examples=[400])
    detail: str
    instance: str = Field(description="the request path")


class ValidationItem(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ValidationProblem(Problem):
    """A 422 for a body or parameter that does not validate."""

    errors: list[ValidationItem] = []


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for problem answers with the given statuses."""
    return {status: _problem(status) for status in statuses}


def _problem(status: int, schema: str = "Problem") -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS.get(status, "Problem"),
        "content": {PROBLEM_JSON: {"schema": {"$ref": _REF + schema}}},
    }


def document_problems(app: FastAPI) -> None:
    """Make ``app.openapi()`` describe the problem answers every route shares."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _with_problems(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _with_problems(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, ValidationProblem):
        document = model.model_json_schema(ref_template=_REF + "{model}")
        components.update(document.pop("$defs", {}))
        components[model.__name__] = document
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            _add_shared(operation)
    return schema


def _add_shared(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    if "422" in responses and "application/json" in responses["422"].get("content", {}):
        responses["422"] = _problem(422, "ValidationProblem")
    if operation.get("security"):  # the token lookup may also find the database down
        for status in ("401", "403", "503"):
            responses.setdefault(status, _problem(int(status)))
    if "requestBody" in operation:  # a body that is not UTF-8 JSON is a 400 (FastAPI's)
        for status in ("400", "413"):
            responses.setdefault(status, _problem(int(status)))
