-- Quarry warehouse (DuckLake), migration 2: which snapshot loaded each mirrored table's rows.
-- loaded_lsn is the consistent point of the snapshot (initial, or the backfill of a table
-- added to the publication later) that loaded the table's pre-existing rows; NULL means they
-- were never loaded and the follower backfills the table.

ALTER TABLE quarry_meta.mirror_tables ADD COLUMN loaded_lsn UBIGINT;

-- A warehouse that already holds a CDC position loaded its tables before this was recorded.
UPDATE quarry_meta.mirror_tables SET loaded_lsn = 0
WHERE EXISTS (SELECT 1 FROM quarry_meta.cdc_position);
