-- Quarry operational schema, migration 9: results of policy evaluations. Forward-only.
--
-- `quarry pipeline run --profile relabel --labels FILE` (docs/pipeline.md, "Evaluation
-- results") writes one row per (policy checkpoint, episode): whether the rollout succeeded and
-- its scores (name -> number). `manifest_id` is the lineage link: the manifest the checkpoint
-- was trained on (recorded in the checkpoint's COMMITTED.json by the trainer), so that a
-- curation can select "the failures of checkpoint X" or "the episodes the policy trained on
-- manifest M failed" in SQL. Evaluating the same checkpoint on the same episode again replaces
-- the row. No foreign key to `manifests`: the run checks before it starts that the manifest
-- is registered, and the registry's rows are never deleted while a result names them.
-- Published to CDC, so that the warehouse's curation view `episode_evaluations` reads it.
CREATE TABLE episode_evaluations (
    checkpoint_id       text NOT NULL,                  -- <training run>/step-<step:010d>
    episode_id          uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    manifest_id         text NOT NULL,                  -- the checkpoint's training manifest
    success             boolean NOT NULL,
    scores              jsonb NOT NULL DEFAULT '{}'::jsonb,  -- name -> number
    evaluation_id       text NOT NULL,                  -- SHA-256 of the results file
    run_id              text NOT NULL,                  -- the pipeline run that wrote it
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (checkpoint_id, episode_id)
);
CREATE INDEX episode_evaluations_episode ON episode_evaluations (episode_id);
CREATE INDEX episode_evaluations_manifest ON episode_evaluations (manifest_id);

ALTER PUBLICATION quarry_cdc ADD TABLE episode_evaluations;
