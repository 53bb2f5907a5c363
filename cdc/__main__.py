"""``python -m cdc``: run the follower as a process (tests, benchmarks, debugging).

``quarry cdc follow`` is the product's entry point; this one takes everything as flags, so it
needs no settings file. SIGTERM and SIGINT stop it cleanly after the current batch.

``--backend ducklake`` (the default) needs ``--catalog-dsn`` and ``--data-path``;
``--backend clickhouse`` reads the server's DSN from the environment variable
``QUARRY_CLICKHOUSE_DSN`` (a secret: never on the command line) and takes ``--database``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import SecretStr

from cdc.config import CdcConfig
from cdc.errors import CdcError
from cdc.follower import BatchReport, follow
from warehouse.backends import open_warehouse
from warehouse.config import ClickHouseConfig, WarehouseConfig
from warehouse.errors import WarehouseError

#: The environment variable holding the ClickHouse DSN (``http(s)://user:password@host:port``).
CLICKHOUSE_DSN_ENV = "QUARRY_CLICKHOUSE_DSN"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cdc", description=__doc__)
    parser.add_argument("command", choices=["follow"])
    parser.add_argument("--source-dsn", required=True, help="libpq DSN of the source database")
    parser.add_argument("--backend", choices=["ducklake", "clickhouse"], default="ducklake")
    parser.add_argument("--catalog-dsn", help="libpq DSN of the lake's catalog (DuckLake)")
    parser.add_argument("--data-path", type=Path, help="folder of the lake's data (DuckLake)")
    parser.add_argument(
        "--database",
        default="quarry",
        help=f"ClickHouse database (the DSN comes from ${CLICKHOUSE_DSN_ENV})",
    )
    parser.add_argument("--slot", default="quarry_cdc")
    parser.add_argument("--publication", default="quarry_cdc")
    parser.add_argument("--status", type=Path, help="status JSON file to keep up to date")
    parser.add_argument("--poll-interval-s", type=float, default=0.1)
    parser.add_argument("--max-changes", type=int, default=50_000)
    parser.add_argument("--heartbeat-s", type=float, default=10.0)
    parser.add_argument("--maintenance-s", type=float, default=300.0)
    parser.add_argument("--flush-s", type=float, default=10.0)
    parser.add_argument(
        "--lag-log", type=Path, help="append each batch's per-transaction lags (JSON lines)"
    )
    parser.add_argument(
        "--resnapshot", action="store_true", help="drop the slot and take a new initial snapshot"
    )
    return parser


def warehouse_config(args: argparse.Namespace, environ: Mapping[str, str]) -> WarehouseConfig:
    """The warehouse the flags (and, for ClickHouse, ``environ``) name; a missing piece is a
    ``ValueError`` that says which."""
    if args.backend == "clickhouse":
        dsn = environ.get(CLICKHOUSE_DSN_ENV, "")
        if not dsn:
            raise ValueError(
                f"--backend clickhouse needs the server's DSN in ${CLICKHOUSE_DSN_ENV} "
                "(e.g. https://user:password@host:8443); it is never taken as a flag"
            )
        return WarehouseConfig(
            backend="clickhouse",
            catalog_dsn=SecretStr("unused"),
            data_path=Path("unused"),
            clickhouse=ClickHouseConfig(dsn=SecretStr(dsn), database=args.database),
        )
    missing = [
        f
        for f, v in (("--catalog-dsn", args.catalog_dsn), ("--data-path", args.data_path))
        if not v
    ]
    if missing:
        raise ValueError(f"--backend ducklake needs {' and '.join(missing)}")
    return WarehouseConfig(catalog_dsn=SecretStr(args.catalog_dsn), data_path=args.data_path)


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = CdcConfig(
        slot=args.slot,
        publication=args.publication,
        poll_interval_s=args.poll_interval_s,
        max_changes_per_batch=args.max_changes,
        heartbeat_interval_s=args.heartbeat_s,
        maintenance_interval_s=args.maintenance_s,
        flush_interval_s=args.flush_s,
        resnapshot=args.resnapshot,
    )
    try:
        lake_config = warehouse_config(args, os.environ)
    except ValueError as error:  # pydantic's ValidationError is one
        print(f"quarry-cdc: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with open_warehouse(lake_config) as lake:
            lake.bootstrap()
            on_batch = _lag_logger(args.lag_log) if args.lag_log else None
            follow(args.source_dsn, lake, config, stop, args.status, on_batch=on_batch)
    except (CdcError, WarehouseError) as error:
        print(f"quarry-cdc: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
