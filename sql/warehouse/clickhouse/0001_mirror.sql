-- Quarry warehouse (ClickHouse), migration 1: the mirrored operational tables and metadata.
-- Forward-only like sql/postgres/: never edit an applied file, add a new numbered one.
-- ${mirror}, ${meta} and ${views} stand for the warehouse's three databases
-- (<database>_mirror, <database>_meta, <database>). ClickHouse runs one statement per call
-- and has no transactions, so every statement here can run again after a crash.
--
-- Each mirrored table keeps every version of a row, not only the newest: the source's
-- columns (key columns not Nullable; String columns holding JSON or bytea say so in their
-- comment) plus
--   _lsn      commit LSN (integer WAL byte position) of the transaction that wrote the version
--   _seq      the change's ordinal inside that transaction (0 for initial-snapshot rows)
--   _deleted  tombstone: the row was deleted (or truncated away) at (_lsn, _seq)
--   _commit   the warehouse snapshot (${meta}.commits) that wrote the version; a minmax skip
--             index on it finds one commit's rows (repairs, data versions) in the parts it wrote
-- A read at snapshot S sees, per key, the newest (_lsn, _seq) among versions with
-- _commit <= S, unless it is a tombstone (the views in views.sql).

CREATE DATABASE IF NOT EXISTS ${mirror};

CREATE DATABASE IF NOT EXISTS ${meta};

CREATE DATABASE IF NOT EXISTS ${views};

CREATE TABLE IF NOT EXISTS ${mirror}.robots (
    id String, model Nullable(String), site Nullable(String),
    created_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.tasks (
    id String, description Nullable(String), created_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.episodes (
    id UUID, robot_id Nullable(String), task_id Nullable(String), site Nullable(String),
    operator Nullable(String), started_at Nullable(DateTime64(6, 'UTC')),
    ended_at Nullable(DateTime64(6, 'UTC')), start_ns Nullable(Int64), end_ns Nullable(Int64),
    steps Nullable(Int32), control_hz Nullable(Float64), success Nullable(Bool),
    uri Nullable(String), size_bytes Nullable(Int64), sha256 Nullable(String),
    topics Nullable(String) COMMENT 'JSON', status Nullable(String),
    schema_version Nullable(Int32), pipeline_version Nullable(Int32),
    robot_sw_version Nullable(String), qc_report Nullable(String) COMMENT 'JSON',
    created_at Nullable(DateTime64(6, 'UTC')), updated_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.episode_quality_flags (
    episode_id UUID, flag String, detail Nullable(String) COMMENT 'JSON',
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (episode_id, flag, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.episode_labels (
    id Int64, episode_id Nullable(UUID), key Nullable(String), value Nullable(String),
    start_ns Nullable(Int64), end_ns Nullable(Int64), author Nullable(String),
    created_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.episode_stats (
    episode_id UUID, field String, dim Int32, count Nullable(Int64), sum Nullable(Float64),
    sum_sq Nullable(Float64), min Nullable(Float64), max Nullable(Float64),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (episode_id, field, dim, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.manifests (
    id String, reuse_key Nullable(String), sql Nullable(String),
    sample_spec Nullable(String) COMMENT 'JSON', snapshot_id Nullable(Int64),
    cdc_position Nullable(String), rows Nullable(Int64), samples Nullable(Int64),
    size_bytes Nullable(Int64), uri Nullable(String), author Nullable(String),
    created_at Nullable(DateTime64(6, 'UTC')),
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

CREATE TABLE IF NOT EXISTS ${mirror}.manifest_episodes (
    manifest_id String, episode_id UUID,
    _lsn UInt64, _seq Int32, _deleted Bool, _commit UInt64,
    INDEX commit_idx _commit TYPE minmax GRANULARITY 1
) ENGINE = MergeTree ORDER BY (manifest_id, episode_id, _lsn, _seq);

-- Every commit: one row, written last, which makes everything tagged with its snapshot
-- visible. The CDC position it reaches is its JSON document (NULL before the first one).
CREATE TABLE IF NOT EXISTS ${meta}.commits (
    snapshot UInt64, position Nullable(String), author String, message String,
    committed_at DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = MergeTree ORDER BY snapshot;

-- Which commit changed which mirrored table ('*': a schema change, which counts for all).
CREATE TABLE IF NOT EXISTS ${meta}.table_changes (table_name String, _commit UInt64)
ENGINE = MergeTree ORDER BY (table_name, _commit);

-- Each mirrored table's key (ClickHouse has no primary keys that constrain), the snapshot
-- LSN that loaded its rows (NULL until a backfill) and its last truncate. A log: the newest
-- row per table (by _commit, then _written) is the current one.
CREATE TABLE IF NOT EXISTS ${meta}.mirror_tables (
    table_name String, key_columns Array(String), loaded_lsn Nullable(UInt64),
    truncated_lsn Nullable(UInt64), truncated_seq Nullable(Int32), _commit UInt64,
    _written DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = MergeTree ORDER BY (table_name, _commit, _written);

INSERT INTO ${meta}.mirror_tables (table_name, key_columns, _commit) VALUES
    ('robots', ['id'], 0),
    ('tasks', ['id'], 0),
    ('episodes', ['id'], 0),
    ('episode_quality_flags', ['episode_id', 'flag'], 0),
    ('episode_labels', ['id'], 0),
    ('episode_stats', ['episode_id', 'field', 'dim'], 0),
    ('manifests', ['id'], 0),
    ('manifest_episodes', ['manifest_id', 'episode_id'], 0);
