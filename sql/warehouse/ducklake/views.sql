-- Quarry warehouse (DuckLake): the curation views. Re-applied whenever this file changes.
-- Runs with the lake as the default catalog (USE <alias>). Curations see only these views
-- (the guard refuses qualified names such as mirror.episodes).
--
-- Contract: `episodes` has exactly one row per live episode: tombstones and retracted
-- episodes are left out, and `SELECT * FROM episodes` is a whole curation. Its first
-- columns are the ones a manifest needs (id, uri, start_ns, end_ns, size_bytes, sha256).
-- UUIDs and JSON are exposed as text so that every backend returns the same Arrow types.

-- An episode's quality flags come sorted from mirror.episode_flag_lists (migration 0008),
-- which the backend keeps in the same commit as the flags and episodes: aggregating the flags
-- table here cost every curation a pass over all of it (docs/curation.md).
CREATE OR REPLACE VIEW main.episodes AS
SELECT
    CAST(e.id AS VARCHAR) AS id,
    e.uri,
    e.start_ns,
    e.end_ns,
    e.size_bytes,
    e.sha256,
    e.robot_id,
    r.model AS robot_model,
    e.task_id,
    e.site,
    e.operator,
    e.success,
    e.started_at,
    e.ended_at,
    CAST(e.end_ns - e.start_ns AS DOUBLE) / 1e9 AS duration_s,
    e.steps,
    e.control_hz,
    CAST(e.topics AS VARCHAR) AS topics,
    coalesce(f.quality_flags, CAST([] AS VARCHAR[])) AS quality_flags,
    CAST(e.qc_report AS VARCHAR) AS qc_report,
    e.schema_version,
    e.pipeline_version,
    e.robot_sw_version,
    e.created_at,
    e.updated_at
FROM mirror.episodes AS e
LEFT JOIN mirror.robots AS r ON r.id = e.robot_id AND NOT r._deleted
-- On robot and task too (the source has them NOT NULL): a curation's filters on them then
-- reach the lists' scan, which skips the other robots' and tasks' row groups.
LEFT JOIN mirror.episode_flag_lists AS f
    ON f.episode_id = e.id AND f.robot_id = e.robot_id AND f.task_id = e.task_id
WHERE NOT e._deleted AND e.status <> 'retracted';

CREATE OR REPLACE VIEW main.episode_quality_flags AS
SELECT CAST(q.episode_id AS VARCHAR) AS episode_id, q.flag, CAST(q.detail AS VARCHAR) AS detail
FROM mirror.episode_quality_flags AS q
WHERE NOT q._deleted
  AND q.episode_id IN (SELECT id FROM mirror.episodes WHERE NOT _deleted AND status <> 'retracted');

CREATE OR REPLACE VIEW main.episode_labels AS
SELECT l.id, CAST(l.episode_id AS VARCHAR) AS episode_id, l.key, l.value, l.start_ns, l.end_ns,
       l.author, l.created_at
FROM mirror.episode_labels AS l
WHERE NOT l._deleted
  AND l.episode_id IN (SELECT id FROM mirror.episodes WHERE NOT _deleted AND status <> 'retracted');

-- An episode's language instruction (a LeRobot task string), one row per live episode that
-- has one. Kept out of `episodes` so that `SELECT * FROM episodes` keeps its columns and every
-- manifest built before the column existed rebuilds byte-identical; join on episode_id.
CREATE OR REPLACE VIEW main.episode_instructions AS
SELECT CAST(e.id AS VARCHAR) AS episode_id, e.instruction
FROM mirror.episodes AS e
WHERE NOT e._deleted AND e.status <> 'retracted' AND e.instruction IS NOT NULL;

CREATE OR REPLACE VIEW main.episode_stats AS
SELECT CAST(s.episode_id AS VARCHAR) AS episode_id, s.field, s.dim, s.count, s.sum, s.sum_sq,
       s.min, s.max
FROM mirror.episode_stats AS s
WHERE NOT s._deleted
  AND s.episode_id IN (SELECT id FROM mirror.episodes WHERE NOT _deleted AND status <> 'retracted');

-- Results of policy evaluations (Postgres migration 0009): one row per (checkpoint, episode),
-- with the manifest the checkpoint trained on (the lineage link) and the scores as JSON text.
CREATE OR REPLACE VIEW main.episode_evaluations AS
SELECT v.checkpoint_id, CAST(v.episode_id AS VARCHAR) AS episode_id, v.manifest_id, v.success,
       CAST(v.scores AS VARCHAR) AS scores, v.evaluation_id, v.run_id, v.created_at
FROM mirror.episode_evaluations AS v
WHERE NOT v._deleted
  AND v.episode_id IN (SELECT id FROM mirror.episodes WHERE NOT _deleted AND status <> 'retracted');

CREATE OR REPLACE VIEW main.robots AS
SELECT id, model, site, created_at FROM mirror.robots WHERE NOT _deleted;

CREATE OR REPLACE VIEW main.tasks AS
SELECT id, description, created_at FROM mirror.tasks WHERE NOT _deleted;

-- Lineage: every registered manifest and its episodes, retracted ones included.
CREATE OR REPLACE VIEW main.manifests AS
SELECT id, reuse_key, sql, CAST(sample_spec AS VARCHAR) AS sample_spec, snapshot_id,
       cdc_position, rows, samples, size_bytes, uri, author, created_at
FROM mirror.manifests WHERE NOT _deleted;

-- A manifest's lineage is written to the lake before its registry row; it shows here once
-- that row has reached the mirror, so a lineage whose manifest never registered never does.
CREATE OR REPLACE VIEW main.manifest_episodes AS
SELECT l.manifest_id, l.episode_id, l.sha256
FROM lineage.manifest_episodes AS l
WHERE l.manifest_id IN (SELECT id FROM mirror.manifests WHERE NOT _deleted);

-- Internal views: what a manifest build reads besides the curation, keyed by the raw episode
-- UUID so that joins on it can skip data. Not in the curation allow-list
-- (warehouse.base.CURATION_VIEWS): users never name them; the service composes them in.

-- Every lineage row as written (warehouse.base.LINEAGE_VIEW): the service's lineage queries
-- keep those of the manifests its registry holds, mirrored yet or not.
CREATE OR REPLACE VIEW main.manifest_lineage AS
SELECT manifest_id, episode_id, sha256 FROM lineage.manifest_episodes;
CREATE OR REPLACE VIEW main.episode_objects AS
SELECT e.id, e.uri, e.start_ns, e.end_ns, e.size_bytes, e.sha256,
       CAST(e.topics AS VARCHAR) AS topics, e.robot_id, e.task_id
FROM mirror.episodes AS e
WHERE NOT e._deleted AND e.status <> 'retracted';

-- Per-episode statistics rows by raw key, live or not: the build reads only the episodes its
-- manifest query returned, which are live at the snapshot it reads.
CREATE OR REPLACE VIEW main.episode_stat_rows AS
SELECT s.episode_id, s.field, s.dim, s.count, s.sum, s.sum_sq, s.min, s.max
FROM mirror.episode_stats AS s
WHERE NOT s._deleted;
