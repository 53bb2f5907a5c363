"""``python -m cdc follow``: run the follower as a process (tests, benchmarks, a follower on
its own machine).

It reads the same settings, from the same environment variables, as ``quarry cdc follow``
(:class:`cdc.settings.FollowerSettings`): ``QUARRY_SOURCE_DSN`` (required here: there is no
state folder with an embedded Postgres), the warehouse as ``QUARRY_WAREHOUSE__...``
(``QUARRY_WAREHOUSE__CATALOG_DSN`` and ``QUARRY_WAREHOUSE__DATA_PATH`` for DuckLake;
``QUARRY_WAREHOUSE__BACKEND=clickhouse`` and ``QUARRY_WAREHOUSE__DSN`` for ClickHouse), the
follower's section as ``QUARRY_CDC__...`` (``QUARRY_CDC__SLOT``, ``QUARRY_CDC__POLL_INTERVAL_S``,
...). Connection strings are secrets and never flags. SIGTERM and SIGINT stop it cleanly after
the current batch.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from cdc.errors import CdcError
from cdc.follower import BatchReport, follow
from cdc.settings import SOURCE_DSN_ENV, FollowerSettings
from warehouse.backends import open_warehouse
from warehouse.errors import WarehouseError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cdc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["follow"])
    parser.add_argument("--status", type=Path, help="status JSON file to keep up to date")
    parser.add_argument(
        "--lag-log", type=Path, help="append each batch's per-transaction lags (JSON lines)"
    )
    parser.add_argument(
        "--resnapshot", action="store_true", help="drop the slot and take a new initial snapshot"
    )
    return parser


def _lag_logger(path: Path) -> Callable[[BatchReport], None]:
    def write(report: BatchReport) -> None:
        with path.open("a") as out:
            out.write(
                json.dumps(
                    {
                        "applied_at": report.applied_at,
                        "lags_s": report.lags_s,
                        "changes": report.changes,
                        "apply_s": round(report.apply_s, 4),
                        "snapshot_id": report.snapshot_id,
                    }
                )
                + "\n"
            )

    return write


def _fail(message: str) -> int:
    print(f"quarry-cdc: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        settings = FollowerSettings()
    except ValidationError as error:
        return _fail(f"bad settings: {error}")
    if settings.source_dsn is None:
        return _fail(f"set {SOURCE_DSN_ENV} to the source database's connection string")
    config = settings.cdc.model_copy(
        update={"resnapshot": args.resnapshot or settings.cdc.resnapshot}
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with open_warehouse(settings.warehouse) as lake:
            lake.bootstrap()
            on_batch = _lag_logger(args.lag_log) if args.lag_log else None
            source = settings.source_dsn.get_secret_value()
            follow(source, lake, config, stop, args.status, on_batch=on_batch)
    except (CdcError, WarehouseError) as error:
        return _fail(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
