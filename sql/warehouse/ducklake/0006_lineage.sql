-- Quarry warehouse (DuckLake), migration 6: lineage in the lake (Postgres migration 0007).
-- Each manifest's lineage (one row per episode, with the SHA-256 of the container version
-- it read) is appended here as one Parquet file by the service's lineage writer, before the
-- manifest's registry row is written; rows whose manifest the registry never held are
-- invisible in the views and collected by `quarry manifests gc`. Episode ids are text, as the
-- views show them, which orders them as Postgres orders uuids.
CREATE SCHEMA IF NOT EXISTS lineage;
CREATE TABLE IF NOT EXISTS lineage.manifest_episodes (
    manifest_id VARCHAR, episode_id VARCHAR, sha256 VARCHAR
);

-- The mirror of Postgres's manifest_episodes retires: the table left the publication, and
-- counts as loaded, so the follower never backfills it; a change of it still in the slot from
-- before the upgrade lands there, where nothing reads it. (Dropping the table instead makes
-- DuckLake 1.5.5 fail later reads of the mirror's inlined rows.)
DROP VIEW IF EXISTS main.manifest_episodes;
UPDATE quarry_meta.mirror_tables SET loaded_lsn = 0
WHERE table_name = 'manifest_episodes' AND loaded_lsn IS NULL;
