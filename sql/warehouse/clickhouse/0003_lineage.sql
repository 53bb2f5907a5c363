-- Quarry warehouse (ClickHouse), migration 3: lineage in the warehouse (Postgres migration
-- 0007). Each manifest's lineage (one row per episode, with the SHA-256 of the container
-- version it read) is inserted here in one block by the service's lineage writer, before the
-- manifest's registry row is written; rows whose manifest the registry never held are
-- invisible in the views and collected by `quarry manifests gc`. Not versioned by commit: a
-- manifest's rows never change once its registry row exists, and the views show them from
-- the snapshot whose mirror holds that row. Episode ids are text, as the views show them.
CREATE TABLE IF NOT EXISTS ${meta}.lineage (
    manifest_id String, episode_id String, sha256 Nullable(String)
) ENGINE = MergeTree ORDER BY (manifest_id, episode_id);

-- The mirror of Postgres's manifest_episodes retires: the table left the publication, and
-- counts as loaded (a newer row of the mirror_tables log), so the follower never backfills
-- it; a change of it still in the slot from before the upgrade lands there, where nothing
-- reads it.
DROP VIEW IF EXISTS ${views}.manifest_episodes;
DROP VIEW IF EXISTS ${meta}.live_manifest_episodes;
INSERT INTO ${meta}.mirror_tables
    (table_name, key_columns, loaded_lsn, truncated_lsn, truncated_seq, _commit)
SELECT table_name, key_columns, ifNull(loaded_lsn, 0), truncated_lsn, truncated_seq, _commit
FROM ${meta}.mirror_tables WHERE table_name = 'manifest_episodes'
ORDER BY _commit DESC, _written DESC LIMIT 1;
