-- Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d), as
-- the superuser POSTGRES_USER: the DuckLake catalog's database and the read-only role the
-- service's curation readers log in as (what `quarry up` does for the embedded Postgres,
-- quarry/stack/postgres.py). The operational database itself is POSTGRES_DB; its tables
-- come from `quarry migrate`.
CREATE DATABASE quarry_catalog;
CREATE ROLE quarry_reader LOGIN PASSWORD 'quarry_reader'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
GRANT CONNECT ON DATABASE quarry_catalog TO quarry_reader;
\connect quarry_catalog
ALTER ROLE quarry_reader SET statement_timeout = '60s';
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO quarry_reader;
-- DuckLake creates its catalog tables at `quarry migrate`, as POSTGRES_USER: readable then.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO quarry_reader;
