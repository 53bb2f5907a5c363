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

-- The mirror of Postgres's manifest_episodes retires: the table left the publication, so
-- the follower must not wait for (or backfill) it. The table itself stays, unregistered (old
-- snapshots read it): dropping it here makes DuckLake 1.5.5 fail later reads of the mirror's
-- inlined rows ("INTERNAL Error: Attempted to access index 0 within vector of size 0",
-- tests/cdc/test_cdc_follower.py).
DROP VIEW IF EXISTS main.manifest_episodes;
DELETE FROM quarry_meta.mirror_tables WHERE table_name = 'manifest_episodes';
