"""Ingestion as durable workflows (DBOS Transact on Quarry's Postgres): one workflow per
recording, its steps fetch -> decode -> transform -> encode -> qc -> stats -> enrich ->
register, run by ``quarry worker`` processes that take work from one queue. Imports only
``episodes`` (and its own dependencies); docs/pipeline.md."""
