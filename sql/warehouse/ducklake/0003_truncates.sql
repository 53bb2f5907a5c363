-- Quarry warehouse (DuckLake), migration 3: the version of each mirrored table's last
-- truncate. A truncate tombstones the rows stored at that moment, but a change older than it
-- may still arrive later for a key that was never stored (a re-delivered Debezium event): the
-- apply drops every staged change older than (truncated_lsn, truncated_seq).

ALTER TABLE quarry_meta.mirror_tables ADD COLUMN truncated_lsn UBIGINT;
ALTER TABLE quarry_meta.mirror_tables ADD COLUMN truncated_seq INTEGER;
