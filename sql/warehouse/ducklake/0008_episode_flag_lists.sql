-- Quarry warehouse (DuckLake), migration 8: each episode's quality flags as one sorted list.
-- Derived, not mirrored: no Postgres table has this shape, so it is not in
-- quarry_meta.mirror_tables and has no _lsn/_seq/_deleted columns. The backend rewrites an
-- episode's row in the same commit as any change of that episode's flags
-- (warehouse/ducklake/flag_lists.py); the `episodes` view joins it instead of aggregating
-- the whole flags table for every curation (the aggregate was 1.1 s of CPU of a ~1% curation
-- over 43M episodes, docs/curation.md). Episodes without a flag have no row. It lives in the
-- mirror schema so that the data versions of the views that read it follow its changes
-- (warehouse/ducklake/versions.py). Snapshots from before this migration keep the view they
-- were taken with, so manifests pinned to them rebuild as they were built.
CREATE TABLE IF NOT EXISTS mirror.episode_flag_lists (episode_id UUID, quality_flags VARCHAR[]);
INSERT INTO mirror.episode_flag_lists
SELECT episode_id, list_sort(list(flag))
FROM mirror.episode_quality_flags
WHERE NOT _deleted
GROUP BY episode_id;
