-- Quarry operational schema, migration 7: lineage leaves the operational database.
-- Forward-only.
--
-- A manifest's lineage (one row per episode) is written to the warehouse now, as one file
-- per manifest, before its manifests row (curation/registration.py): a 439k-episode
-- curation no longer sends 439k rows and their index entries through the WAL and CDC.
-- The table leaves the publication, and keeps its rows under another name until the
-- upgrade has appended each manifest's lineage to the warehouse; the upgrade then drops it
-- (curation/lineage.py, carry_over_lineage: `quarry up` and `quarry migrate` run it).
ALTER PUBLICATION quarry_cdc DROP TABLE manifest_episodes;
ALTER TABLE manifest_episodes RENAME TO manifest_episodes_legacy;
