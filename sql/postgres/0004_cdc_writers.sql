-- Quarry operational schema, migration 4: the liveness of the warehouse's CDC writers.
-- Forward-only.
--
-- One row per writer of a warehouse position: the follower, keyed by its replication slot,
-- or a Debezium connector feeding POST /v1/cdc/debezium, keyed 'debezium:<connector>'. The
-- follower rewrites its row about once a second (cdc.report_interval_s), the Debezium endpoint
-- at every request; times are Postgres's own clock. `quarry cdc status`, `quarry status`,
-- /readyz and /metrics judge a writer from this row and pg_replication_slots (cdc/liveness.py),
-- so the judgement holds for a follower on another machine.
--
-- UNLOGGED: a report writes no WAL, so it never reaches a publication (not even one FOR ALL
-- TABLES: publications leave unlogged tables out), cannot loop through CDC, and does not move
-- the WAL position the judgement compares the warehouse's position with. A crash of Postgres
-- empties the table; the writers fill it again at their next report.
CREATE UNLOGGED TABLE cdc_writers (
    slot                text PRIMARY KEY,
    kind                text NOT NULL CHECK (kind IN ('follower', 'debezium')),
    state               text NOT NULL,
    host                text,
    pid                 integer,
    position_lsn        pg_lsn,
    commit_at           timestamptz,
    advanced_at         timestamptz,
    seen_at             timestamptz NOT NULL,
    report_interval_s   double precision NOT NULL CHECK (report_interval_s > 0),
    advance_interval_s  double precision NOT NULL CHECK (advance_interval_s > 0),
    last_error          text,
    last_error_at       timestamptz,
    errors_total        bigint NOT NULL DEFAULT 0,
    started_at          timestamptz NOT NULL,
    status              jsonb
);

COMMENT ON TABLE cdc_writers IS
    'CDC writers'' last reports (cdc/liveness.py); unlogged, never published';
COMMENT ON COLUMN cdc_writers.commit_at IS
    'source commit time of the last transaction (or heartbeat) the warehouse position covers';
COMMENT ON COLUMN cdc_writers.advanced_at IS 'when position_lsn or commit_at last moved';
COMMENT ON COLUMN cdc_writers.seen_at IS 'when the writer last reported';
