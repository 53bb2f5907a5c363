-- Slices of episodes by labelled segment: one manifest row per `phase = grasp` segment, cut to
-- the segment's log-time range [start_ns, end_ns). Labels come from
-- POST /v1/episodes/{id}/labels and reach this view by CDC.
SELECT l.episode_id AS id, l.start_ns, l.end_ns, e.task_id
FROM episode_labels AS l
JOIN episodes AS e ON e.id = l.episode_id
WHERE l.key = 'phase'
  AND l.value = 'grasp'
  AND l.start_ns IS NOT NULL
