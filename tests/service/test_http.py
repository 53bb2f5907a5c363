"""HTTP as users expect it, against the live service: problem documents for every error,
OpenAPI that documents them, body size limits, Prometheus metrics, manifest downloads with
ETag and Range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

PROBLEM = "application/problem+json"
LIMIT = 1 << 20  # service.max_body_bytes, the default


@pytest.fixture(scope="module")
def openapi(api: httpx.Client) -> dict[str, Any]:
    response = api.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def operations(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_unknown_path_and_wrong_method_are_problems(api: httpx.Client) -> None:
    missing = api.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM
    assert missing.json()["instance"] == "/v1/nothing-here"
    wrong = api.delete("/healthz")
    assert wrong.status_code == 405 and wrong.headers["content-type"] == PROBLEM
    assert wrong.headers["allow"] == "GET"


def test_openapi_documents_problems_on_every_route(openapi: dict[str, Any]) -> None:
    assert {"Problem", "ValidationProblem"} <= set(openapi["components"]["schemas"])
    assert "HTTPValidationError" not in openapi["components"]["schemas"]
    for method, path, operation in operations(openapi):
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")) and not (path == "/readyz" and status == "503"):
                assert list(response["content"]) == [PROBLEM], (method, path, status)
        if operation.get("security"):
            assert {"401", "403"} <= set(operation["responses"]), (method, path)
        if "requestBody" in operation:
            assert "413" in operation["responses"], (method, path)


def test_openapi_declares_bearer_auth(openapi: dict[str, Any]) -> None:
    schemes = openapi["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values()] == ["bearer"]
    open_routes = {path for _, path, op in operations(openapi) if not op.get("security")}
    # The token endpoints Debezium's JWT authenticator calls take a username and password.
    token_routes = {"/v1/auth/authenticate", "/v1/auth/refreshToken"}
    assert open_routes == {"/healthz", "/readyz", "/metrics"} | token_routes


def test_list_routes_paginate(openapi: dict[str, Any]) -> None:
    for method, path, operation in operations(openapi):
        schema = operation["responses"].get("200", {}).get("content", {})
        ref = schema.get("application/json", {}).get("schema", {}).get("$ref", "")
        if method == "GET" and ref.endswith("Page"):
            names = {p["name"] for p in operation.get("parameters", [])}
            assert {"limit", "cursor"} <= names, path


def test_body_over_the_limit_is_413_before_it_is_read(api: httpx.Client) -> None:
    big = b'{"sql": "' + b" " * LIMIT + b'"}'
    response = api.post("/v1/sql", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM
    assert str(LIMIT) in response.json()["detail"]


def test_streamed_body_over_the_limit_is_413(api: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"sql": "'
        for _ in range(LIMIT // 65536 + 2):
            yield b" " * 65536
        yield b'"}'

    response = api.post("/v1/sql", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM


def test_body_under_the_limit_is_served(api: httpx.Client) -> None:
    padded = "SELECT 1 AS one" + " " * 60_000
    assert api.post("/v1/sql", json={"sql": padded}).status_code == 200


def test_metrics_have_latency_per_route_and_cdc_figures(api: httpx.Client) -> None:
    api.get("/v1/manifests/" + "0" * 64)
    api.post("/v1/sql", json={"sql": "SELECT * FROM read_csv('/x')"})
    response = httpx.get(f"{api.base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        'quarry_http_request_duration_seconds_count{method="GET",'
        'route="/v1/manifests/{manifest_id}",status="404"}' in text
    )
    assert 'quarry_queries_total{kind="sql",outcome="refused"}' in text
    assert 'quarry_cdc_up{slot="quarry_cdc"} 1.0' in text
    assert "quarry_cdc_lag_seconds" in text or "quarry_cdc_changes_total" in text
    assert "process_resident_memory_bytes" in text


def test_unmatched_paths_share_one_metric_label(api: httpx.Client) -> None:
    for n in range(3):
        api.get(f"/no/such/path/{n}")
    text = httpx.get(f"{api.base_url}/metrics").text
    assert "/no/such/path" not in text
    assert 'route="<unmatched>",status="404"' in text


@pytest.fixture(scope="module")
def manifest(api: httpx.Client) -> tuple[str, bytes]:
    created = api.post("/v1/curations", json={"sql": "SELECT * FROM episodes"})
    assert created.status_code == 201, created.text
    manifest_id = created.json()["manifest_id"]
    whole = api.get(f"/v1/manifests/{manifest_id}/arrow")
    assert whole.status_code == 200
    return manifest_id, whole.content


def test_manifest_download_is_cacheable(api: httpx.Client, manifest: tuple[str, bytes]) -> None:
    manifest_id, content = manifest
    url = f"/v1/manifests/{manifest_id}/arrow"
    whole = api.get(url)
    assert whole.headers["etag"] == f'"{manifest_id}"'
    assert "immutable" in whole.headers["cache-control"]
    assert whole.headers["accept-ranges"] == "bytes"
    assert int(whole.headers["content-length"]) == len(content)
    listed = api.get(url, headers={"If-None-Match": f'"other", "{manifest_id}"'})
    assert listed.status_code == 304 and listed.content == b""
    stale = api.get(url, headers={"If-None-Match": '"other"'})
    assert stale.status_code == 200 and stale.content == content


def test_manifest_download_serves_ranges(api: httpx.Client, manifest: tuple[str, bytes]) -> None:
    manifest_id, content = manifest
    url = f"/v1/manifests/{manifest_id}/arrow"
    size = len(content)
    middle = api.get(url, headers={"Range": "bytes=100-199"})
    assert middle.status_code == 206 and middle.content == content[100:200]
    assert middle.headers["content-range"] == f"bytes 100-199/{size}"
    tail = api.get(url, headers={"Range": "bytes=-6"})
    assert tail.status_code == 206 and tail.content == content[-6:] == b"ARROW1"
    open_ended = api.get(url, headers={"Range": f"bytes={size - 10}-"})
    assert open_ended.content == content[-10:]
    beyond = api.get(url, headers={"Range": f"bytes={size + 10}-{size + 20}"})
    assert beyond.status_code == 416
    resumed = api.get(url, headers={"Range": "bytes=0-9", "If-Range": f'"{manifest_id}"'})
    assert resumed.status_code == 206 and resumed.content == content[:10]
    changed = api.get(url, headers={"Range": "bytes=0-9", "If-Range": '"other"'})
    assert changed.status_code == 200 and changed.content == content


def test_docs_work_offline(api: httpx.Client) -> None:
    """/docs is Swagger UI with its assets from the installed bundle: no CDN, no internet."""
    page = api.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "cdn." not in page.text and "https://" not in page.text.split("<body>")[0]
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert f"/docs-assets/{asset}" in page.text
        served = api.get(f"/docs-assets/{asset}")
        assert served.status_code == 200 and len(served.content) > 500, asset
    assert "/openapi.json" in page.text and api.get("/openapi.json").status_code == 200
