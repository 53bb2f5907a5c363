-- Quarry warehouse (DuckLake), migration 8: each flagged episode's quality flags as one sorted
-- list, with the episode's robot and task. Derived, not mirrored: no Postgres table has this
-- shape, so it is not in quarry_meta.mirror_tables and has no _lsn/_seq/_deleted columns. The
-- backend keeps it in the same commit as the flags and episode rows it is made of
-- (warehouse/ducklake/flag_lists.py). The `episodes` view joins it on id, robot and task
-- instead of aggregating the whole flags table for every curation (1.1 s of CPU of a ~1%
-- curation over 43M episodes, docs/curation.md); sorted by robot and task, the table gives a
-- curation that names them only those row groups. Episodes without a flag have no row. It
-- lives in the mirror schema so that the data versions of the views that read it follow its
-- changes (warehouse/ducklake/versions.py). Snapshots from before this migration keep the
-- view they were taken with, so manifests pinned to them rebuild as they were built.
CREATE TABLE IF NOT EXISTS mirror.episode_flag_lists (
    episode_id UUID, robot_id VARCHAR, task_id VARCHAR, quality_flags VARCHAR[]
);
ALTER TABLE mirror.episode_flag_lists SET SORTED BY (robot_id ASC, task_id ASC);
INSERT INTO mirror.episode_flag_lists
SELECT f.episode_id, e.robot_id, e.task_id, list_sort(list(f.flag))
FROM mirror.episode_quality_flags AS f
LEFT JOIN mirror.episodes AS e ON e.id = f.episode_id AND NOT e._deleted
WHERE NOT f._deleted
GROUP BY f.episode_id, e.robot_id, e.task_id;
