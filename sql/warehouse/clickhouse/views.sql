-- Quarry warehouse (ClickHouse): the curation views. Re-applied whenever this file changes.
-- The same views, column names and result types as sql/warehouse/ducklake/views.sql; see
-- there for the contract (`episodes` has one row per live episode, manifest columns first).
--
-- ClickHouse has no snapshots: every view takes the snapshot to read as a parameter,
-- `episodes(snapshot = 42)`, and the reader adds it to every view a query names. The
-- `${meta}.live_*` views give each mirrored table's rows at that snapshot: per key, the
-- newest version (_lsn, _seq) among those committed at or before it, tombstones left out.
-- Readers run with join_use_nulls = 1 (an unmatched LEFT JOIN side is NULL, as in DuckDB).
--
-- A live view is its table's versions committed by the snapshot, tombstones left out, minus
-- those that `${meta}.<table>_superseded` (migration 0005, written by the writer in the
-- commit that writes the newer version) lists as superseded by then: an anti-join with a
-- small set instead of a newest-version pick (a window or an aggregate) over the whole
-- table, which sorted or aggregated every version before a curation's filters (8.6 s for a
-- ~1% curation over 10M episodes). Each version's liveness depends on it and the list
-- alone, not on the other rows a scan keeps, so every filter may prune the scan, those on
-- changing columns (success, status) too (tests/curation/test_clickhouse_newest_version.py).
-- MergeTree keeps every version and entry (no engine merges any away); only maintenance
-- deletes those no kept snapshot reads.

CREATE OR REPLACE VIEW ${meta}.live_robots AS
SELECT * FROM ${mirror}.robots
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (id, _lsn, _seq) NOT IN (
    SELECT id, _lsn, _seq FROM ${meta}.robots_superseded WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_tasks AS
SELECT * FROM ${mirror}.tasks
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (id, _lsn, _seq) NOT IN (
    SELECT id, _lsn, _seq FROM ${meta}.tasks_superseded WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_episodes AS
SELECT * FROM ${mirror}.episodes
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (id, _lsn, _seq) NOT IN (
    SELECT id, _lsn, _seq FROM ${meta}.episodes_superseded WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_episode_quality_flags AS
SELECT * FROM ${mirror}.episode_quality_flags
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (episode_id, flag, _lsn, _seq) NOT IN (
    SELECT episode_id, flag, _lsn, _seq FROM ${meta}.episode_quality_flags_superseded
    WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_episode_labels AS
SELECT * FROM ${mirror}.episode_labels
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (id, _lsn, _seq) NOT IN (
    SELECT id, _lsn, _seq FROM ${meta}.episode_labels_superseded WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_episode_stats AS
SELECT * FROM ${mirror}.episode_stats
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted
    AND (episode_id, field, dim, _lsn, _seq) NOT IN (
    SELECT episode_id, field, dim, _lsn, _seq FROM ${meta}.episode_stats_superseded
    WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_episode_evaluations AS
SELECT * FROM ${mirror}.episode_evaluations
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted
    AND (checkpoint_id, episode_id, _lsn, _seq) NOT IN (
    SELECT checkpoint_id, episode_id, _lsn, _seq FROM ${meta}.episode_evaluations_superseded
    WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${meta}.live_manifests AS
SELECT * FROM ${mirror}.manifests
WHERE _commit <= {snapshot:UInt64} AND NOT _deleted AND (id, _lsn, _seq) NOT IN (
    SELECT id, _lsn, _seq FROM ${meta}.manifests_superseded WHERE _commit <= {snapshot:UInt64}
);

CREATE OR REPLACE VIEW ${views}.episodes AS
WITH flags AS (
    SELECT episode_id, arraySort(groupArray(flag)) AS quality_flags
    FROM ${meta}.live_episode_quality_flags(snapshot = {snapshot:UInt64})
    GROUP BY episode_id
)
SELECT
    toString(e.id) AS id,
    e.uri AS uri,
    e.start_ns AS start_ns,
    e.end_ns AS end_ns,
    e.size_bytes AS size_bytes,
    e.sha256 AS sha256,
    e.robot_id AS robot_id,
    r.model AS robot_model,
    e.task_id AS task_id,
    e.site AS site,
    e.operator AS operator,
    e.success AS success,
    e.started_at AS started_at,
    e.ended_at AS ended_at,
    CAST(e.end_ns - e.start_ns AS Nullable(Float64)) / 1e9 AS duration_s,
    e.steps AS steps,
    e.control_hz AS control_hz,
    e.topics AS topics,
    f.quality_flags AS quality_flags,
    e.qc_report AS qc_report,
    e.schema_version AS schema_version,
    e.pipeline_version AS pipeline_version,
    e.robot_sw_version AS robot_sw_version,
    e.created_at AS created_at,
    e.updated_at AS updated_at
FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64}) AS e
LEFT JOIN ${meta}.live_robots(snapshot = {snapshot:UInt64}) AS r ON r.id = e.robot_id
LEFT JOIN flags AS f ON f.episode_id = e.id
WHERE e.status <> 'retracted';

CREATE OR REPLACE VIEW ${views}.episode_quality_flags AS
SELECT toString(q.episode_id) AS episode_id, q.flag AS flag, q.detail AS detail
FROM ${meta}.live_episode_quality_flags(snapshot = {snapshot:UInt64}) AS q
WHERE q.episode_id IN (
    SELECT id FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64})
    WHERE status <> 'retracted'
);

CREATE OR REPLACE VIEW ${views}.episode_labels AS
SELECT l.id AS id, toString(l.episode_id) AS episode_id, l.key AS key, l.value AS value,
       l.start_ns AS start_ns, l.end_ns AS end_ns, l.author AS author,
       l.created_at AS created_at
FROM ${meta}.live_episode_labels(snapshot = {snapshot:UInt64}) AS l
WHERE l.episode_id IN (
    SELECT id FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64})
    WHERE status <> 'retracted'
);

-- See sql/warehouse/ducklake/views.sql for why the instruction has a view of its own.
CREATE OR REPLACE VIEW ${views}.episode_instructions AS
SELECT toString(e.id) AS episode_id, e.instruction AS instruction
FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64}) AS e
WHERE e.status <> 'retracted' AND e.instruction IS NOT NULL;

CREATE OR REPLACE VIEW ${views}.episode_stats AS
SELECT toString(s.episode_id) AS episode_id, s.field AS field, s.dim AS dim,
       s.count AS count, s.sum AS sum, s.sum_sq AS sum_sq, s.min AS min, s.max AS max
FROM ${meta}.live_episode_stats(snapshot = {snapshot:UInt64}) AS s
WHERE s.episode_id IN (
    SELECT id FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64})
    WHERE status <> 'retracted'
);

-- Results of policy evaluations; see sql/warehouse/ducklake/views.sql.
CREATE OR REPLACE VIEW ${views}.episode_evaluations AS
SELECT v.checkpoint_id AS checkpoint_id, toString(v.episode_id) AS episode_id,
       v.manifest_id AS manifest_id, v.success AS success, v.scores AS scores,
       v.evaluation_id AS evaluation_id, v.run_id AS run_id, v.created_at AS created_at
FROM ${meta}.live_episode_evaluations(snapshot = {snapshot:UInt64}) AS v
WHERE v.episode_id IN (
    SELECT id FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64})
    WHERE status <> 'retracted'
);

CREATE OR REPLACE VIEW ${views}.robots AS
SELECT id, model, site, created_at FROM ${meta}.live_robots(snapshot = {snapshot:UInt64});

CREATE OR REPLACE VIEW ${views}.tasks AS
SELECT id, description, created_at FROM ${meta}.live_tasks(snapshot = {snapshot:UInt64});

-- Lineage: every registered manifest and its episodes, retracted ones included.
CREATE OR REPLACE VIEW ${views}.manifests AS
SELECT id, reuse_key, sql, sample_spec, snapshot_id, cdc_position, rows, samples, size_bytes,
       uri, author, created_at
FROM ${meta}.live_manifests(snapshot = {snapshot:UInt64});

-- A manifest's lineage is written before its registry row; it shows here from the snapshot
-- whose mirror holds that row, so a lineage whose manifest never registered never does.
CREATE OR REPLACE VIEW ${views}.manifest_episodes AS
SELECT manifest_id, episode_id, sha256 FROM ${meta}.lineage
WHERE manifest_id IN (SELECT id FROM ${meta}.live_manifests(snapshot = {snapshot:UInt64}));

-- Every lineage row as written (warehouse.base.LINEAGE_VIEW): the service's lineage queries
-- keep those of the manifests its registry holds, mirrored yet or not. Lineage rows carry no
-- commit; the snapshot every view takes is unused here.
CREATE OR REPLACE VIEW ${views}.manifest_lineage AS
SELECT manifest_id, episode_id, sha256 FROM ${meta}.lineage WHERE {snapshot:UInt64} >= 0;

-- Internal views: what a manifest build reads besides the curation, keyed by the raw episode
-- UUID so that joins on it can skip data. Not in the curation allow-list
-- (warehouse.base.CURATION_VIEWS): users never name them; the service composes them in.
CREATE OR REPLACE VIEW ${views}.episode_objects AS
SELECT e.id AS id, e.uri AS uri, e.start_ns AS start_ns, e.end_ns AS end_ns,
       e.size_bytes AS size_bytes, e.sha256 AS sha256, e.topics AS topics,
       e.robot_id AS robot_id, e.task_id AS task_id
FROM ${meta}.live_episodes(snapshot = {snapshot:UInt64}) AS e
WHERE e.status <> 'retracted';

-- Per-episode statistics rows by raw key, live or not: the build reads only the episodes its
-- manifest query returned, which are live at the snapshot it reads.
CREATE OR REPLACE VIEW ${views}.episode_stat_rows AS
SELECT s.episode_id AS episode_id, s.field AS field, s.dim AS dim, s.count AS count,
       s.sum AS sum, s.sum_sq AS sum_sq, s.min AS min, s.max AS max
FROM ${meta}.live_episode_stats(snapshot = {snapshot:UInt64}) AS s;
