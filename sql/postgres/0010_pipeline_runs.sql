-- Quarry operational schema, migration 10: the pipeline's runs and their replays.
-- Forward-only.
--
-- DBOS keeps each workflow's state (schema `quarry_pipeline`); what it does not know is the
-- run as a whole: what it was asked to do and how big it is. `enqueue_run` writes one row per
-- run where it enqueues the run's batches (docs/pipeline.md, "Operations"), so that
-- `quarry pipeline runs` lists runs newest first and `show` and `/metrics` can tell progress
-- against the planned size. Not in the CDC publication: operations, not corpus data.
CREATE TABLE pipeline_runs (
    run_id                  text PRIMARY KEY,            -- run-<hex>, watch-<episode>
    profile                 text NOT NULL,               -- full, reprocess, metadata, relabel
    created_at              timestamptz NOT NULL DEFAULT now(),
    pipeline_version        integer NOT NULL,            -- the stamp the run writes
    selection               jsonb NOT NULL DEFAULT '{}'::jsonb,  -- paths, where, episodes
    recordings              integer NOT NULL CHECK (recordings >= 0),
    batches                 integer NOT NULL CHECK (batches >= 0),
    planned_bytes           bigint NOT NULL CHECK (planned_bytes >= 0),   -- sources' bytes
    planned_episode_s       double precision CHECK (planned_episode_s >= 0)  -- NULL: unknown
);
CREATE INDEX pipeline_runs_created ON pipeline_runs (created_at DESC);

-- `quarry pipeline replay RUN --from STEP` reruns a recording's workflow under its own ID,
-- which replaces its failure in DBOS's records: the failure is kept here.
CREATE TABLE pipeline_replays (
    run_id                  text NOT NULL,
    workflow_id             text NOT NULL,               -- <run>:<episode>
    from_step               text NOT NULL,
    previous_status         text,                        -- NULL: it had no workflow yet
    previous_step           text,
    previous_error          text,                        -- error class
    previous_message        text,
    replayed_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pipeline_replays_run ON pipeline_replays (run_id, replayed_at);
