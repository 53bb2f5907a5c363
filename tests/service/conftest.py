"""Fixtures the service tests share: a client of the session stack's service, as its local
admin, and a reader of its warehouse."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from quarry.stack.lifecycle import Stack
from tests.fixtures.curation import api_client
from warehouse.ducklake.backend import DuckLakeWarehouse


@pytest.fixture(scope="module")
def api(corpus: Stack) -> Iterator[httpx.Client]:
    with api_client(corpus) as client:
        yield client


@pytest.fixture(scope="module")
def corpus_lake(corpus: Stack) -> Iterator[DuckLakeWarehouse]:
    """The session stack's warehouse, read in this process."""
    with DuckLakeWarehouse(corpus.settings.warehouse_config()) as lake:
        yield lake
