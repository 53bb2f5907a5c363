-- Quarry warehouse (DuckLake), migration 5: the mirror of episodes.instruction (Postgres
-- migration 0006). The follower would also add it at the first change that carries it; this
-- makes it exist before then, so the view `episode_instructions` always compiles.
ALTER TABLE mirror.episodes ADD COLUMN IF NOT EXISTS instruction VARCHAR;
