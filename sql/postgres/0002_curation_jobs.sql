-- Quarry operational schema, migration 2: asynchronous curation jobs and the retraction log.
-- Forward-only. Neither table is published to CDC: both are control-plane bookkeeping.

-- One row per asynchronous curation build. A service process claims the jobs it runs
-- (`owner`, a random id per process) and refreshes `heartbeat_at` while they are queued or
-- running; a job whose owner stopped heartbeating is read as failed ("lost"), never as
-- pending forever. A cancel asked of any replica sets `cancel_requested`; the owner sees it
-- on its next heartbeat and interrupts the warehouse query.
CREATE TABLE curation_jobs (
    id                  uuid PRIMARY KEY,
    status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    request             jsonb NOT NULL,                  -- {"sql"|"filters", "sample_spec"}
    author              text NOT NULL,
    owner               text NOT NULL,                   -- service process running the job
    heartbeat_at        timestamptz NOT NULL DEFAULT now(),
    cancel_requested    boolean NOT NULL DEFAULT false,
    result              jsonb,                           -- the curation result when succeeded
    error               jsonb,                           -- a problem document when failed
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz
);
CREATE INDEX curation_jobs_active ON curation_jobs (owner) WHERE status IN ('queued', 'running');

-- Who retracted which episode, when and why (the episode row carries only its status).
CREATE TABLE episode_retractions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_id      uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    reason          text NOT NULL DEFAULT '',
    author          text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX episode_retractions_episode ON episode_retractions (episode_id);
