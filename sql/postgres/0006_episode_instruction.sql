-- Quarry operational schema, migration 6: an episode's language instruction. Forward-only.
--
-- The task string a LeRobot dataset keeps per episode ("pick up the red cube"), or any
-- recording's instruction. NULL where the source has none (synthetic and MCAP episodes).
-- CDC carries it into the warehouse's mirror; curations read it from the view
-- `episode_instructions` (not from `episodes`, whose `SELECT *` would then carry one more
-- column and change the bytes of every manifest built before).
ALTER TABLE episodes ADD COLUMN instruction text;
