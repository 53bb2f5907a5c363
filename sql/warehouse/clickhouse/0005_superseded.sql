-- Quarry warehouse (ClickHouse), migration 5: each curated table's superseded versions, so
-- that a live view is the mirrored versions minus a small list instead of a newest-version
-- pick (a window, or an aggregate and a join) over the whole table.
--
-- ${meta}.<table>_superseded holds the key and (_lsn, _seq) of every version that a newer
-- version of its key (or a tombstone) replaced, and in _commit the first commit that made
-- the replacement visible: a read at snapshot S hides a version exactly when its entry has
-- _commit <= S, so a read pinned before a change still sees what it saw. The writer adds
-- entries in the commit that writes the newer version (warehouse/clickhouse/superseded.py);
-- repair deletes a failed write's entries with its rows (they carry its commit), and
-- maintenance deletes the entries of versions it purged. Plain MergeTree, like the mirror:
-- nothing merges an entry away.
--
-- The backfill lists the versions the mirror holds now: each version that has a newer one,
-- superseded at the earliest commit of those newer ones. Rerunning it adds nothing.
--
-- With no newest-version pick left, a curation's cost is its scan of the episode versions,
-- ordered by id, so a filter on robot and task still reads every granule of every column
-- it returns (its wide uri, sha256 and topics too). The projection `by_curation` keeps a
-- second copy of the versions ordered by robot, task and start time (columns that never
-- change for an episode), which the engine reads instead where those filters prune it (a
-- ~1% curation over 2M rows in chDB: 1.1 s to 0.04 s for the scan); lookups by id keep
-- the table's own order. It holds every version too, so it answers every snapshot; it
-- doubles the table's storage and each insert's sorting. Lightweight deletes (repair,
-- maintenance) rebuild it in the parts they touch. Materializing it for existing parts is
-- a background mutation; parts without it are read as before until it is done.
ALTER TABLE ${mirror}.episodes MODIFY SETTING lightweight_mutation_projection_mode = 'rebuild';

ALTER TABLE ${mirror}.episodes
    ADD PROJECTION IF NOT EXISTS by_curation (SELECT * ORDER BY robot_id, task_id, start_ns);

ALTER TABLE ${mirror}.episodes MATERIALIZE PROJECTION by_curation;

CREATE TABLE IF NOT EXISTS ${meta}.robots_superseded (
    id String, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

INSERT INTO ${meta}.robots_superseded (id, _lsn, _seq, _commit)
SELECT id, _lsn, _seq, _by FROM (
    SELECT id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.robots
) WHERE _rank > 1
AND (id, _lsn, _seq) NOT IN (SELECT id, _lsn, _seq FROM ${meta}.robots_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.tasks_superseded (
    id String, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

INSERT INTO ${meta}.tasks_superseded (id, _lsn, _seq, _commit)
SELECT id, _lsn, _seq, _by FROM (
    SELECT id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.tasks
) WHERE _rank > 1
AND (id, _lsn, _seq) NOT IN (SELECT id, _lsn, _seq FROM ${meta}.tasks_superseded);

-- Episodes grow to tens of millions of rows: only keys with more than one version go
-- through the window.
CREATE TABLE IF NOT EXISTS ${meta}.episodes_superseded (
    id UUID, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

INSERT INTO ${meta}.episodes_superseded (id, _lsn, _seq, _commit)
SELECT id, _lsn, _seq, _by FROM (
    SELECT id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.episodes
    WHERE id IN (SELECT id FROM ${mirror}.episodes GROUP BY id HAVING count() > 1)
) WHERE _rank > 1
AND (id, _lsn, _seq) NOT IN (SELECT id, _lsn, _seq FROM ${meta}.episodes_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.episode_quality_flags_superseded (
    episode_id UUID, flag String, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (episode_id, flag, _lsn, _seq);

INSERT INTO ${meta}.episode_quality_flags_superseded (episode_id, flag, _lsn, _seq, _commit)
SELECT episode_id, flag, _lsn, _seq, _by FROM (
    SELECT episode_id, flag, _lsn, _seq,
        min(_commit) OVER (PARTITION BY episode_id, flag ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY episode_id, flag ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.episode_quality_flags
) WHERE _rank > 1
AND (episode_id, flag, _lsn, _seq) NOT IN
    (SELECT episode_id, flag, _lsn, _seq FROM ${meta}.episode_quality_flags_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.episode_labels_superseded (
    id Int64, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

INSERT INTO ${meta}.episode_labels_superseded (id, _lsn, _seq, _commit)
SELECT id, _lsn, _seq, _by FROM (
    SELECT id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.episode_labels
) WHERE _rank > 1
AND (id, _lsn, _seq) NOT IN (SELECT id, _lsn, _seq FROM ${meta}.episode_labels_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.episode_stats_superseded (
    episode_id UUID, field String, dim Int32, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (episode_id, field, dim, _lsn, _seq);

INSERT INTO ${meta}.episode_stats_superseded (episode_id, field, dim, _lsn, _seq, _commit)
SELECT episode_id, field, dim, _lsn, _seq, _by FROM (
    SELECT episode_id, field, dim, _lsn, _seq,
        min(_commit) OVER (PARTITION BY episode_id, field, dim ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (
            PARTITION BY episode_id, field, dim ORDER BY _lsn DESC, _seq DESC
        ) AS _rank
    FROM ${mirror}.episode_stats
) WHERE _rank > 1
AND (episode_id, field, dim, _lsn, _seq) NOT IN
    (SELECT episode_id, field, dim, _lsn, _seq FROM ${meta}.episode_stats_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.episode_evaluations_superseded (
    checkpoint_id String, episode_id UUID, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (checkpoint_id, episode_id, _lsn, _seq);

INSERT INTO ${meta}.episode_evaluations_superseded
    (checkpoint_id, episode_id, _lsn, _seq, _commit)
SELECT checkpoint_id, episode_id, _lsn, _seq, _by FROM (
    SELECT checkpoint_id, episode_id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY checkpoint_id, episode_id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (
            PARTITION BY checkpoint_id, episode_id ORDER BY _lsn DESC, _seq DESC
        ) AS _rank
    FROM ${mirror}.episode_evaluations
) WHERE _rank > 1
AND (checkpoint_id, episode_id, _lsn, _seq) NOT IN
    (SELECT checkpoint_id, episode_id, _lsn, _seq FROM ${meta}.episode_evaluations_superseded);

CREATE TABLE IF NOT EXISTS ${meta}.manifests_superseded (
    id String, _lsn UInt64, _seq Int32, _commit UInt64
) ENGINE = MergeTree ORDER BY (id, _lsn, _seq);

INSERT INTO ${meta}.manifests_superseded (id, _lsn, _seq, _commit)
SELECT id, _lsn, _seq, _by FROM (
    SELECT id, _lsn, _seq,
        min(_commit) OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _by,
        row_number() OVER (PARTITION BY id ORDER BY _lsn DESC, _seq DESC) AS _rank
    FROM ${mirror}.manifests
) WHERE _rank > 1
AND (id, _lsn, _seq) NOT IN (SELECT id, _lsn, _seq FROM ${meta}.manifests_superseded);
