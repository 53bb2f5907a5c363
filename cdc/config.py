"""Settings of the CDC follower: one pydantic section, built by the entry point and passed in."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CdcConfig(BaseModel):
    """How the follower reads the source. Times in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slot: str = Field(
        default="quarry_cdc",
        pattern=r"^[a-z0-9_]{1,63}$",
        description="logical replication slot (one per warehouse)",
    )
    publication: str = Field(default="quarry_cdc", pattern=r"^[A-Za-z0-9_]{1,63}$")
    poll_interval_s: float = Field(
        default=0.1,
        gt=0,
        description="longest wait for a transaction before the follower does its idle work "
        "(heartbeat, maintenance, status)",
    )
    max_changes_per_batch: int = Field(
        default=50_000,
        ge=1,
        description="the reader stops reading while this many changes wait to be applied; a "
        "batch still ends at a commit, so one large transaction can exceed it",
    )
    heartbeat_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="when idle this long, record the WAL flush point and advance the slot so "
        "a quiet slot does not hold WAL; a position that has not moved for 3 times this while "
        "the source's WAL is past it reads as stalled",
    )
    report_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="how often the follower reports its state and position to the source's "
        "cdc_writers table; silent for 5 times this reads as stalled, or as down once its "
        "replication connection is gone",
    )
    maintenance_interval_s: float = Field(
        default=300.0,
        gt=0,
        description="run full warehouse maintenance (purge tombstones, compact, expire "
        "snapshots) between batches at most this often",
    )
    flush_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="flush rows and deletes the lake keeps inlined in its catalog to data "
        "files this often (a short step between batches; keeps a batch's cost flat)",
    )
    snapshot_batch_bytes: int = Field(
        default=8 << 20, ge=1 << 16, description="CSV bytes per snapshot chunk"
    )
    snapshot_workers: int = Field(
        default=2, ge=1, le=16, description="connections reading a large table's page ranges"
    )
    snapshot_split_pages: int = Field(
        default=4096, ge=1, description="tables larger than this are read in ranges"
    )
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=10.0, gt=0)
    unexpected_retries: int = Field(
        default=5,
        ge=0,
        description="an error the follower does not know (a bug, an unclassified library "
        "error) is logged with its traceback and retried like a lost connection this many "
        "times in a row before the follower stops on it",
    )
    resnapshot: bool = Field(
        default=False,
        description="drop the slot and take a new initial snapshot; only "
        "by explicit request (a lost slot is otherwise an error)",
    )
