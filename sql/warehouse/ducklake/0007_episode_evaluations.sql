-- Quarry warehouse (DuckLake), migration 7: the mirror of episode_evaluations (Postgres
-- migration 0009), results of policy evaluations by checkpoint and episode. Created here, not
-- at the follower's first change of it, so that the view `episode_evaluations` always
-- compiles; its rows count as unloaded, so the follower backfills the table (the rows written
-- before it joined the publication) and then streams it.
CREATE TABLE IF NOT EXISTS mirror.episode_evaluations (
    checkpoint_id VARCHAR, episode_id UUID, manifest_id VARCHAR, success BOOLEAN,
    scores JSON, evaluation_id VARCHAR, run_id VARCHAR, created_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);
INSERT INTO quarry_meta.mirror_tables (table_name, key_columns)
SELECT 'episode_evaluations', ['checkpoint_id', 'episode_id']
WHERE NOT EXISTS (
    SELECT 1 FROM quarry_meta.mirror_tables WHERE table_name = 'episode_evaluations'
);
