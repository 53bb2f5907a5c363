-- Quarry operational schema, migration 1. Forward-only: never edit a released migration,
-- add a new numbered file instead. Applied by service/migrations.py inside one transaction.

CREATE TABLE robots (
    id              text PRIMARY KEY,
    model           text NOT NULL,
    site            text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tasks (
    id              text PRIMARY KEY,
    description     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE episodes (
    id                  uuid PRIMARY KEY,
    robot_id            text NOT NULL REFERENCES robots (id),
    task_id             text NOT NULL REFERENCES tasks (id),
    site                text NOT NULL,
    operator            text NOT NULL,
    started_at          timestamptz NOT NULL,           -- wall clock
    ended_at            timestamptz NOT NULL,
    start_ns            bigint NOT NULL,                 -- log time, integer nanoseconds
    end_ns              bigint NOT NULL,
    steps               integer NOT NULL,                -- steps at the control rate
    control_hz          double precision NOT NULL,
    success             boolean NOT NULL,
    uri                 text NOT NULL UNIQUE,            -- container in the object store
    size_bytes          bigint NOT NULL,
    sha256              text NOT NULL,                   -- hex digest of the container bytes
    topics              jsonb NOT NULL,                  -- [{"topic","group","rate_hz","kind"}]
    status              text NOT NULL DEFAULT 'active'
                        CHECK (status IN ('active', 'retracted')),
    schema_version      integer NOT NULL,
    pipeline_version    integer NOT NULL,
    robot_sw_version    text NOT NULL,
    qc_report           jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (end_ns > start_ns),
    CHECK (steps >= 0),
    CHECK (size_bytes >= 0)
);
CREATE INDEX episodes_robot_task ON episodes (robot_id, task_id);

-- One row per raised quality flag (absence means the check passed).
CREATE TABLE episode_quality_flags (
    episode_id      uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    flag            text NOT NULL,                       -- e.g. camera_blackout, choppy_joints
    detail          jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (episode_id, flag)
);

-- Enrichment labels; a segment label carries a log-time range inside the episode.
CREATE TABLE episode_labels (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_id      uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    key             text NOT NULL,
    value           text NOT NULL,
    start_ns        bigint,
    end_ns          bigint,
    author          text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((start_ns IS NULL) = (end_ns IS NULL)),
    CHECK (start_ns IS NULL OR end_ns > start_ns)
);
CREATE INDEX episode_labels_episode ON episode_labels (episode_id);

-- Per-dimension sufficient statistics, computed from the data at ingest, so that a manifest's
-- normalization statistics are one SQL aggregate over its episodes.
CREATE TABLE episode_stats (
    episode_id      uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    field           text NOT NULL,                       -- topic-derived field, e.g. state, action
    dim             integer NOT NULL,
    count           bigint NOT NULL,
    sum             double precision NOT NULL,
    sum_sq          double precision NOT NULL,
    min             double precision NOT NULL,
    max             double precision NOT NULL,
    PRIMARY KEY (episode_id, field, dim)
);

-- Manifest registry: author and creation time live here, not in the manifest file.
CREATE TABLE manifests (
    id              text PRIMARY KEY,                    -- SHA-256 of the manifest bytes
    reuse_key       text NOT NULL,
    sql             text NOT NULL,                       -- normalized curation SQL
    sample_spec     jsonb NOT NULL,
    snapshot_id     bigint NOT NULL,                     -- warehouse snapshot it was built at
    cdc_position    text NOT NULL,
    rows            bigint NOT NULL,
    samples         bigint NOT NULL,
    size_bytes      bigint NOT NULL,
    uri             text NOT NULL,
    author          text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX manifests_reuse_key ON manifests (reuse_key);

CREATE TABLE manifest_episodes (
    manifest_id     text NOT NULL REFERENCES manifests (id) ON DELETE CASCADE,
    episode_id      uuid NOT NULL,
    PRIMARY KEY (manifest_id, episode_id)
);
CREATE INDEX manifest_episodes_episode ON manifest_episodes (episode_id);

-- API tokens, stored hashed. Not published to CDC.
CREATE TABLE api_tokens (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL,
    token_sha256    text NOT NULL UNIQUE,
    scopes          text[] NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz
);

-- The tables CDC mirrors into the warehouse.
CREATE PUBLICATION quarry_cdc FOR TABLE
    robots, tasks, episodes, episode_quality_flags, episode_labels, episode_stats,
    manifests, manifest_episodes;
