"""The ClickHouse backend, the scale-out warehouse, through clickhouse-connect.

``backend.ClickHouseWarehouse`` implements :class:`warehouse.base.Warehouse`; the other modules
are its parts (client, apply, reader, pinning, meta, maintenance, schema). Only this subpackage
imports ``clickhouse_connect``; it never imports ``duckdb``.
"""
