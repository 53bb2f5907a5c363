"""The DuckLake backend, the embedded default: catalog in Postgres, data as Parquet.

``backend.DuckLakeWarehouse`` implements :class:`warehouse.base.Warehouse`; the other modules
are its parts (connection, apply, statements, reader, pinning, versions, maintenance, schema).
Only this subpackage imports ``duckdb``.
"""
