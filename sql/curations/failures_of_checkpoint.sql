-- Evaluation results: the episodes a policy checkpoint failed (its rollouts, or the episodes
-- it was evaluated on), whole, with its scores and the manifest it was trained on as extra
-- manifest columns; the next curation to train on them, or to look at. Results come in with
-- `quarry pipeline run --profile relabel --labels FILE` (docs/pipeline.md, "Evaluation
-- results"). Fill the placeholder:
--   quarry curate --sql-file THIS --param checkpoint_id=pick-v3/step-0000000400
WITH params AS (
    SELECT '<checkpoint_id>' AS checkpoint_id
)
SELECT e.id, e.robot_id, e.task_id, v.manifest_id AS trained_on, v.scores
FROM episodes AS e
JOIN episode_evaluations AS v ON v.episode_id = e.id
JOIN params AS p ON v.checkpoint_id = p.checkpoint_id
WHERE NOT v.success
