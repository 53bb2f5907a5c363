-- Lineage: the episodes no registered manifest holds yet (never curated for training).
SELECT id, robot_id, task_id
FROM episodes
WHERE id NOT IN (SELECT episode_id FROM manifest_episodes)
