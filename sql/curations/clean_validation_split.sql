-- The validation part (10%) of a deterministic split of the episodes that raised no quality
-- flag. An episode's part depends only on its id: md5('quarry:' || id), first 32 bits, below
-- 0x19999999 (10% of the range) is validation. Flip `<` to `>=` for the training part.
-- The same split as the structured filter {"split": {"part": "validation"}}.
SELECT id, robot_id, task_id
FROM episodes
WHERE array_length(quality_flags) = 0
  AND substring(md5('quarry' || ':' || id), 1, 8) < '19999999'
