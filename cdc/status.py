"""The follower's status document: replaced atomically in a local file after every batch
(and at least once a second while idle) for ``python -m cdc follow --status``, and reported
to the source's ``cdc_writers`` table with the follower's liveness (``cdc/liveness.py``),
where ``quarry status``, ``quarry cdc status`` and the service's ``/metrics`` read it."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class FollowerStatus:
    """What the follower is doing. Times are ISO 8601 UTC; durations in seconds.

    ``lag_s`` is Postgres commit time (pgoutput Begin) to warehouse commit, for the oldest
    transaction of the last applied batch; while the source is quiet, heartbeat transactions
    keep it current. ``slot_lag_bytes`` is WAL written since the slot's confirmed position,
    ``slot_lag_s`` how long ago the WAL passed that position, ``slot_retained_bytes`` the WAL
    the slot holds from its restart point, ``slot_restart_age_s`` how long ago the WAL passed
    that restart point. A status whose ``updated_at`` is more than a few seconds old means the
    follower is not running (it rewrites the file at least once a second).
    """

    slot: str
    state: str = "starting"  # starting, snapshotting, streaming, retrying, failed, stopped
    pid: int = field(default_factory=os.getpid)
    position_lsn: str | None = None
    commit_lsn: str | None = None
    snapshot_id: int | None = None
    lag_s: float | None = None
    max_lag_s: float | None = None
    rows_per_s: float = 0.0
    changes_total: int = 0
    transactions_total: int = 0
    batches_total: int = 0
    snapshot_rows: int | None = None
    snapshot_s: float | None = None
    slot_lag_bytes: int | None = None
    slot_lag_s: float | None = None
    slot_retained_bytes: int | None = None
    slot_restart_age_s: float | None = None
    last_batch_changes: int = 0
    last_batch_s: float | None = None
    maintenance_total: int = 0
    maintenance_s: float | None = None
    tombstones_purged_total: int = 0
    backfilled_rows: int = 0
    last_error: str | None = None
    last_error_at: str | None = None
    errors_total: int = 0
    started_at: str = field(default_factory=utc_now)
    updated_at: str = field(default_factory=utc_now)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FollowerStatus:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> FollowerStatus:
        """The status of a document (fields it does not know are ignored)."""
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in doc.items() if k in known})


def write_status(path: Path, status: FollowerStatus) -> None:
    """Replace ``path`` with ``status`` atomically (temp file in the same folder + rename)."""
    status.updated_at = utc_now()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(status.to_json())
        Path(temp).replace(path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_status(path: Path) -> FollowerStatus | None:
    """The last status the follower wrote, or ``None`` if it never wrote one."""
    try:
        return FollowerStatus.from_json(path.read_text())
    except FileNotFoundError:
        return None
