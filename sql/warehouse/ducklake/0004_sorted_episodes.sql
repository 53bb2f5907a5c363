-- Quarry warehouse (DuckLake), migration 4: the episode mirror is kept sorted by robot, task
-- and start time. DuckLake sorts every file it writes for this table (CDC batches, inlined-row
-- flushes, compaction), so each file's row groups cover a narrow range of robots and tasks
-- and a curation filtering on them skips the others by their min/max statistics instead of
-- decoding every row's URI and checksum (a ~1% curation over 43M rows: 3.0 s -> 1.3 s for the
-- query, see docs/curation.md). Files written before this migration keep their order until
-- compaction rewrites them.

ALTER TABLE mirror.episodes SET SORTED BY (robot_id ASC, task_id ASC, start_ns ASC);
