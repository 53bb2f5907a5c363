-- Lineage: the episodes of one manifest that were processed by an older pipeline and need
-- reprocessing before the manifest is rebuilt. Fill its placeholders:
--   quarry curate --sql-file THIS --param manifest_id=ID --param pipeline_version_below=2
-- (GET /v1/manifests/{id}/episodes?pipeline_version_below=N answers the same from the
-- registry, retracted episodes included).
WITH params AS (
    SELECT '<manifest_id>' AS manifest_id,
        CAST('<pipeline_version_below>' AS INTEGER) AS pipeline_version_below
)
SELECT e.id, e.pipeline_version, e.robot_id, e.task_id
FROM episodes AS e
JOIN manifest_episodes AS me ON me.episode_id = e.id
JOIN params AS p ON me.manifest_id = p.manifest_id
WHERE e.pipeline_version < p.pipeline_version_below
