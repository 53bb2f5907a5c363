"""What the curation tests share: one warehouse config per backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quarry.stack.postgres import EmbeddedPostgres
from tests.fixtures.clickhouse import ChdbEngine
from tests.fixtures.warehouse import new_warehouse_config
from warehouse.config import WarehouseConfig


@pytest.fixture(scope="module")
def configs(
    postgres: EmbeddedPostgres, chdb: ChdbEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, WarehouseConfig]]:
    """A fresh lake (DuckLake on the session Postgres) and a fresh chDB database, by backend
    name; the chDB database is dropped after the module."""
    configs = {
        "ducklake": new_warehouse_config(postgres, tmp_path_factory.mktemp("lake")),
        "clickhouse": chdb.new_config(),
    }
    yield configs
    chdb.drop(configs["clickhouse"])
