"""The engine's side of the guard: a query the guard lets through but that runs away is stopped
by the time limit (408), a result over the row cap is refused (422), a query over the memory
limit fails cleanly; all as problem documents. The limits come from Settings, as in
production; the app is the real one, served by uvicorn on a loopback port against the session
stack."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from quarry.settings import CurationConfig
from quarry.stack.lifecycle import Stack
from service.app import create_app
from tests.fixtures.curation import RUNAWAY_SQL
from tests.fixtures.serving import served
from tests.fixtures.stack import CORPUS_EPISODES

PROBLEM = "application/problem+json"
TIMEOUT_S = 1.0
MAX_ROWS = CORPUS_EPISODES - 1


def _client(corpus: Stack, limits: CurationConfig) -> Iterator[httpx.Client]:
    settings = corpus.settings.model_copy(update={"curation": limits})
    headers = {"Authorization": f"Bearer {corpus.paths.admin_token.read_text().strip()}"}
    with (
        served(create_app(settings.service_settings())) as url,
        httpx.Client(base_url=url, headers=headers, timeout=600) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def limited(corpus: Stack) -> Iterator[httpx.Client]:
    """The service app with a 1 s query time limit and a row cap below the corpus."""
    yield from _client(corpus, CurationConfig(timeout_s=TIMEOUT_S, max_rows=MAX_ROWS))


@pytest.fixture(scope="module")
def memory_limited(corpus: Stack) -> Iterator[httpx.Client]:
    """The service app with a small memory limit and a time limit long enough that, however
    loaded the machine, the memory limit is what stops a hungry query."""
    yield from _client(corpus, CurationConfig(timeout_s=300, memory_limit="64MB"))


def test_runaway_query_is_stopped_by_the_time_limit(limited: httpx.Client) -> None:
    started = time.monotonic()
    response = limited.post("/v1/curations", json={"sql": RUNAWAY_SQL})
    elapsed = time.monotonic() - started
    assert response.status_code == 408, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["timeout_s"] == TIMEOUT_S
    assert elapsed < TIMEOUT_S + 5


def test_runaway_preview_is_stopped_too(limited: httpx.Client) -> None:
    response = limited.post("/v1/curations/preview", json={"sql": RUNAWAY_SQL})
    assert response.status_code == 408
    assert response.headers["content-type"] == PROBLEM


def test_row_cap_is_a_422(limited: httpx.Client) -> None:
    # A curation no other test builds: an existing manifest would be reused, not queried.
    sql = "SELECT id, steps AS row_cap_probe FROM episodes"
    response = limited.post("/v1/curations", json={"sql": sql})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["max_rows"] == MAX_ROWS
    fits = limited.post("/v1/curations", json={"sql": f"{sql} LIMIT {MAX_ROWS}"})
    assert fits.status_code == 201, fits.text


def test_memory_limit_is_enforced_by_the_engine(memory_limited: httpx.Client) -> None:
    # Aggregating a ~10^6-row cross join into strings needs far more than 64 MB.
    sql = (
        "SELECT a.episode_id AS id, string_agg(a.field || b.field || c.field, ',') AS s "
        "FROM episode_stats a, episode_stats b, episode_stats c GROUP BY a.episode_id"
    )
    response = memory_limited.post("/v1/curations", json={"sql": sql})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    assert "out of memory" in response.json()["detail"].lower()


def test_service_stays_healthy_after_limits(limited: httpx.Client) -> None:
    assert limited.get("/healthz").status_code == 200
    response = limited.post("/v1/curations", json={"sql": "SELECT id FROM episodes LIMIT 1"})
    assert response.status_code == 201
