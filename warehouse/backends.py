"""Choosing the warehouse backend from the config: DuckLake (embedded) or ClickHouse.

Both implement :class:`warehouse.base.Warehouse`. Their ``query_arrow`` takes SQL in the
backend's own dialect: render a checked curation with ``CheckedQuery.render(dialect_of(...))``.
"""

from __future__ import annotations

from typing import Literal

from warehouse.base import Warehouse
from warehouse.config import ClickHouseConfig, WarehouseConfig

Backend = Literal["ducklake", "clickhouse"]

#: The sqlglot dialect each backend's ``query_arrow`` takes.
DIALECTS: dict[Backend, str] = {"ducklake": "duckdb", "clickhouse": "clickhouse"}


def open_warehouse(config: WarehouseConfig) -> Warehouse:
    """The warehouse ``config.backend`` names; nothing connects until first use.

    :raises WarehouseError: a connection string the backend needs is not set.
    """
    if isinstance(config, ClickHouseConfig):
        from warehouse.clickhouse.backend import ClickHouseWarehouse

        return ClickHouseWarehouse(config)
    from warehouse.ducklake.backend import DuckLakeWarehouse

    return DuckLakeWarehouse(config)


def dialect_of(config: WarehouseConfig) -> str:
    """The SQL dialect (sqlglot's name) that the configured backend's queries are in."""
    return DIALECTS[config.backend]
