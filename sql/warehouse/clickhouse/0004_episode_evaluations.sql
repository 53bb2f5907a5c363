-- Quarry warehouse (ClickHouse), migration 4: the mirror of episode_evaluations (Postgres
-- migration 0009), results of policy evaluations by checkpoint and episode. Created here, not
-- at the follower's first change of it, so that the view `episode_evaluations` always
-- compiles; its rows count as unloaded (loaded_lsn NULL), so the follower backfills the table
-- and then streams it.
CREATE TABLE IF NOT EXISTS ${mirror}.episode_evaluations (
    checkpoint_id String, episode_id UUID, manifest_id Nullable(String),
    success Nullable(Bool), scores Nullable(String) COMMENT 'JSON',
    evaluation_id Nullable(String), run_id Nullable(String),
    created_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (checkpoint_id, episode_id, _lsn, _seq);

INSERT INTO ${meta}.mirror_tables (table_name, key_columns, _commit)
SELECT 'episode_evaluations', ['checkpoint_id', 'episode_id'], 0
WHERE (SELECT count() FROM ${meta}.mirror_tables WHERE table_name = 'episode_evaluations') = 0;
