"""Change-data-capture from the operational Postgres into the warehouse."""
