-- Lineage: refresh a manifest without the episodes retracted since it was built (the
-- `episodes` view leaves retracted episodes out). Whole episodes: a manifest of slices needs
-- its own curation with the slicing. Fill the placeholder:
--   quarry curate --sql-file THIS --param manifest_id=ID
WITH params AS (
    SELECT '<manifest_id>' AS manifest_id
)
SELECT e.*
FROM episodes AS e
WHERE e.id IN (
    SELECT me.episode_id
    FROM manifest_episodes AS me
    JOIN params AS p ON me.manifest_id = p.manifest_id
)
