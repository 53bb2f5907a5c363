-- Quarry operational schema, migration 5: manifests a team can live with. Forward-only.
--
-- A manifest's name, tags and description, given when it is curated (and edited later),
-- live in the registry with its author and creation time, never in the file: they change
-- neither its bytes nor its ID. A retired manifest stays registered (its lineage, SQL and
-- history stay); `quarry manifests gc` may delete its file unless a trainer pulled it or a
-- label (a tag or its name) points at it.
ALTER TABLE manifests
    ADD COLUMN name         text NOT NULL DEFAULT '',
    ADD COLUMN tags         text[] NOT NULL DEFAULT '{}',
    ADD COLUMN description  text NOT NULL DEFAULT '',
    ADD COLUMN retired_at   timestamptz;
-- A manifest ID prefix (`quarry manifests show 9f2c81d0`) is a LIKE 'prefix%' lookup.
CREATE INDEX manifests_id_prefix ON manifests (id text_pattern_ops);
CREATE INDEX manifests_tags ON manifests USING gin (tags);

-- Every download of a manifest file (GET /v1/manifests/{id}/arrow): who pulled it, from
-- where, for which run. Trainers run on other machines, so the service records the pull; a
-- pulled manifest's file is never garbage-collected. Not published to CDC (control plane).
-- The foreign key makes a pull and a garbage collection of the same manifest take turns
-- (the pull's key-share lock against the collection's row lock).
CREATE TABLE manifest_pulls (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    manifest_id     text NOT NULL REFERENCES manifests (id),
    principal       text NOT NULL,                   -- the token's name
    run             text NOT NULL DEFAULT '',        -- X-Quarry-Run: the training run, if any
    client          text NOT NULL DEFAULT '',        -- User-Agent
    address         text NOT NULL DEFAULT '',        -- the peer's address
    pulled_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX manifest_pulls_manifest ON manifest_pulls (manifest_id, pulled_at);
