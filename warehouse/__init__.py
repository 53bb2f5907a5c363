"""Warehouse backends behind one interface: DuckLake (embedded default) and ClickHouse."""
