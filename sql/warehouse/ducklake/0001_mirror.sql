-- Quarry warehouse (DuckLake), migration 1: the mirrored operational tables and CDC metadata.
-- Forward-only like sql/postgres/: never edit an applied file, add a new numbered one.
-- Runs with the lake as the default catalog (USE <alias>), inside one transaction.
--
-- Each mirrored table has the source's columns plus:
--   _lsn      commit LSN (integer WAL byte position) of the transaction that wrote the row
--   _seq      the change's ordinal inside that transaction (0 for initial-snapshot rows)
--   _deleted  tombstone: the row was deleted (or truncated away) at (_lsn, _seq)
-- A change is applied only when its (_lsn, _seq) is newer than the stored row's, so replays
-- converge. Deleted rows stay as tombstones so that an older, replayed insert cannot revive them.

CREATE SCHEMA IF NOT EXISTS mirror;

CREATE TABLE mirror.robots (
    id VARCHAR, model VARCHAR, site VARCHAR, created_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.tasks (
    id VARCHAR, description VARCHAR, created_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.episodes (
    id UUID, robot_id VARCHAR, task_id VARCHAR, site VARCHAR, operator VARCHAR,
    started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ, start_ns BIGINT, end_ns BIGINT,
    steps INTEGER, control_hz DOUBLE, success BOOLEAN, uri VARCHAR, size_bytes BIGINT,
    sha256 VARCHAR, topics JSON, status VARCHAR, schema_version INTEGER,
    pipeline_version INTEGER, robot_sw_version VARCHAR, qc_report JSON,
    created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.episode_quality_flags (
    episode_id UUID, flag VARCHAR, detail JSON,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.episode_labels (
    id BIGINT, episode_id UUID, key VARCHAR, value VARCHAR, start_ns BIGINT, end_ns BIGINT,
    author VARCHAR, created_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.episode_stats (
    episode_id UUID, field VARCHAR, dim INTEGER, count BIGINT, sum DOUBLE, sum_sq DOUBLE,
    min DOUBLE, max DOUBLE,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.manifests (
    id VARCHAR, reuse_key VARCHAR, sql VARCHAR, sample_spec JSON, snapshot_id BIGINT,
    cdc_position VARCHAR, rows BIGINT, samples BIGINT, size_bytes BIGINT, uri VARCHAR,
    author VARCHAR, created_at TIMESTAMPTZ,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

CREATE TABLE mirror.manifest_episodes (
    manifest_id VARCHAR, episode_id UUID,
    _lsn UBIGINT, _seq INTEGER, _deleted BOOLEAN
);

-- The key of each mirrored table (DuckLake has no primary keys). Tables added to the
-- publication later are registered by the follower.
CREATE TABLE quarry_meta.mirror_tables (table_name VARCHAR, key_columns VARCHAR[]);
INSERT INTO quarry_meta.mirror_tables VALUES
    ('robots', ['id']),
    ('tasks', ['id']),
    ('episodes', ['id']),
    ('episode_quality_flags', ['episode_id', 'flag']),
    ('episode_labels', ['id']),
    ('episode_stats', ['episode_id', 'field', 'dim']),
    ('manifests', ['id']),
    ('manifest_episodes', ['manifest_id', 'episode_id']);

-- The CDC position: one row, replaced in the same transaction as the batch it ends.
-- The same document is the commit's extra info (see <alias>.snapshots()).
CREATE TABLE quarry_meta.cdc_position (position JSON, applied_at TIMESTAMPTZ);
