-- Every successful episode of a picking task, whole, with the robot and task as extra manifest
-- columns (the trainer can condition on them).
SELECT id, robot_id, task_id
FROM episodes
WHERE success
  AND task_id LIKE 'pick%'
