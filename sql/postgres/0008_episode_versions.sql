-- Quarry operational schema, migration 8: container versions and source recordings.
-- Forward-only. Independent of migration 7 (lineage storage): it reads and writes neither.
--
-- An episode keeps its id (from its source recording) across processings; each processing
-- writes a new container, at its own content-addressed URI, recorded here as a version. The
-- `episodes` row keeps the current version's uri, size_bytes and sha256 (and stamps), so CDC
-- carries a reprocess into the warehouse as an update of that row: new curations see the new
-- version, and a manifest rebuilt at its pinned snapshot reads the row as it was then, whose
-- container file stays until `quarry episodes gc` finds no manifest that lists it.
-- Neither table is published to CDC: the warehouse's views and every manifest's bytes stay as
-- they were (the same reason migration 6 kept `instruction` out of the `episodes` view).
CREATE TABLE episode_containers (
    episode_id          uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    version             integer NOT NULL CHECK (version >= 1),
    uri                 text NOT NULL UNIQUE,
    size_bytes          bigint NOT NULL CHECK (size_bytes >= 0),
    sha256              text NOT NULL,
    schema_version      integer NOT NULL,
    pipeline_version    integer NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    superseded_at       timestamptz,                     -- NULL: the current version
    PRIMARY KEY (episode_id, version)
);
CREATE UNIQUE INDEX episode_containers_current
    ON episode_containers (episode_id) WHERE superseded_at IS NULL;

-- Every episode registered before this migration has one container: version 1.
INSERT INTO episode_containers (
    episode_id, version, uri, size_bytes, sha256, schema_version, pipeline_version, created_at
)
SELECT id, 1, uri, size_bytes, sha256, schema_version, pipeline_version, created_at
FROM episodes;

-- Where an episode's source recording lies, so that a reprocess starts from it and never
-- re-encodes Quarry's own (lossy) container: a recording copied into the landing area
-- (kind 'mcap', options: the mapping and salvage flag it was read with), or the generator's
-- parameters of a synthetic episode (kind 'synth', uri synth:<seed>/<index>).
CREATE TABLE episode_sources (
    episode_id          uuid PRIMARY KEY REFERENCES episodes (id) ON DELETE CASCADE,
    kind                text NOT NULL CHECK (kind IN ('synth', 'mcap')),
    uri                 text NOT NULL,
    size_bytes          bigint NOT NULL CHECK (size_bytes >= 0),
    sha256              text NOT NULL,
    options             jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at          timestamptz NOT NULL DEFAULT now()
);
