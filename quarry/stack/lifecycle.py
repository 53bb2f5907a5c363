"""The embedded stack of one state folder: Postgres, the warehouse, the CDC follower, the
HTTP service and one pipeline worker (``quarry worker``, executor ID :data:`STACK_WORKER_ID`).
``up`` starts what is not running and returns once every part is healthy; the
parts keep running in the background until ``down``.

With ``cdc.source = "debezium"`` (``QUARRY_CDC__SOURCE``) Debezium Server feeds the warehouse
through the service and no follower runs: ``up`` starts none (and stops one an earlier ``up``
left running), and the ``cdc`` part reports the Debezium connector's liveness, ``waiting``
(healthy) until its first request."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
from filelock import FileLock

from cdc.debezium import SLOT_PREFIX
from cdc.liveness import Liveness, liveness_at, writer_slot
from curation.lineage import carry_over_lineage
from quarry.errors import ConfigError, StackError
from quarry.settings import Settings
from quarry.stack import processes
from quarry.stack.migrations import apply_migrations
from quarry.stack.postgres import CATALOG_DB, OPERATIONAL_DB, EmbeddedPostgres
from quarry.stack.processes import Daemon
from service.tokens import ensure_admin_token
from warehouse.backends import open_warehouse
from warehouse.config import ClickHouseConfig, DuckLakeConfig, WarehouseConfig

T = TypeVar("T")

#: DSN scheme of chDB (``warehouse.clickhouse.client.CHDB_SCHEME``, not imported here: the
#: stack loads clickhouse-connect only when it uses it).
CHDB_SCHEME = "chdb:"
# Started in this order by ``up``, stopped in reverse by ``down``.
DAEMONS = ("cdc", "service", "worker")
#: The executor ID of the pipeline worker ``up`` starts (docs/pipeline.md): its own, so a
#: ``quarry worker`` started by hand (``local`` by default) never shares it.
STACK_WORKER_ID = "stack"


@dataclass
class PartStatus:
    healthy: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class StackStatus:
    state_dir: str
    service_url: str | None
    parts: dict[str, PartStatus]

    @property
    def healthy(self) -> bool:
        return all(part.healthy for part in self.parts.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "service_url": self.service_url,
            "healthy": self.healthy,
            "parts": {name: {"healthy": p.healthy, **p.detail} for name, p in self.parts.items()},
        }


def check_stack_backend(config: WarehouseConfig) -> None:
    """Refuse a warehouse the stack's separate processes cannot share: chDB (ClickHouse
    in-process) opens one data folder in one process only, and the follower and the service
    are two. The stack runs on DuckLake (the default) or a ClickHouse server."""
    if isinstance(config, ClickHouseConfig) and config.server_dsn.startswith(CHDB_SCHEME):
        raise ConfigError(
            "the embedded stack cannot run on chDB: the CDC follower and the service are "
            "separate processes and chDB opens a data folder in one process only; use "
            "DuckLake (the default) or a ClickHouse server (http(s)://...)"
        )


def check_external(settings: Settings) -> None:
    """Refuse ``up --external`` unless every part is addressed by the settings: Postgres by
    ``source_dsn``, the warehouse (DuckLake's catalog, readers' SELECT-only login and data in
    S3, or a ClickHouse server) and the manifests in S3, so that no state is left on this
    machine's disk. Lists every missing setting at once."""
    missing = []
    if settings.source_dsn is None:
        missing.append("QUARRY_SOURCE_DSN")
    section = settings.warehouse
    if isinstance(section, DuckLakeConfig):
        for name, value in (
            ("CATALOG_DSN", section.catalog_dsn),
            ("READER_CATALOG_DSN", section.reader_catalog_dsn),
            ("DATA_URL", section.data_url),
        ):
            if value is None:
                missing.append(f"QUARRY_WAREHOUSE__{name}")
    if settings.manifests.url is None:
        missing.append("QUARRY_MANIFESTS__URL")
    if missing:
        raise ConfigError(
            "`up --external` runs against Postgres and S3 by their settings alone; set "
            + ", ".join(missing),
            missing=missing,
        )


class Stack:
    """Controls the embedded stack of ``settings.state_dir``: every part on this machine, or,
    ``up(external=True)``, the service and the follower against the parts the settings
    address (docs/deploy.md), with no embedded Postgres."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.paths = settings.paths
        self.postgres = EmbeddedPostgres(self.paths)

    # -- lifecycle -------------------------------------------------------------------------

    def up(self, *, external: bool = False) -> StackStatus:
        """Start every part that is not running; wait until all are healthy."""
        if external:
            check_external(self.settings)
        check_stack_backend(self.settings.warehouse_config())  # before anything starts
        self.paths.ensure()
        with FileLock(str(self.paths.root / "stack.lock"), timeout=120):
            record = self._read_record()
            if record.get("external", False) != external and record.get("service"):
                raise StackError(
                    "this state folder's stack runs "
                    + ("external" if record.get("external") else "embedded")
                    + " parts; `quarry down` first"
                )
            if external:
                self._prepare_external()
            else:
                self._start_postgres()
            self._bootstrap_warehouse(reader_role=not external)
            record["external"] = external
            if self._debezium_fed():
                processes.terminate((record.pop("cdc", None) or {}).get("pid"), self._marker())
            for name in self._daemons():
                record[name] = self._ensure_daemon(name, record.get(name))
            self._write_record(record)
            self._wait_for_service(record["service"]["pid"])
            if not self._debezium_fed():
                self._wait_for_cdc(record["cdc"]["pid"])
        return self.status()

    def down(self) -> None:
        """Stop the service, then Postgres. Idempotent; keeps every byte of state."""
        with FileLock(str(self.paths.root / "stack.lock"), timeout=120):
            record = self._read_record()
            for name in reversed(DAEMONS):
                processes.terminate((record.get(name) or {}).get("pid"), self._marker())
            self.paths.service_url.unlink(missing_ok=True)
            if not record.get("external"):
                self.postgres.stop()
            self._write_record({})

    def status(self) -> StackStatus:
        record = self._read_record()
        url = self._service_url()
        parts = {
            "postgres": self._postgres_status(external=bool(record.get("external"))),
            "cdc": self._cdc_status((record.get("cdc") or {}).get("pid")),
            "service": self._service_status((record.get("service") or {}).get("pid"), url),
            "worker": self._worker_status((record.get("worker") or {}).get("pid")),
        }
        return StackStatus(str(self.paths.root), url, parts)

    # -- parts -----------------------------------------------------------------------------

    def _debezium_fed(self) -> bool:
        return self.settings.cdc.source == "debezium"

    def _daemons(self) -> tuple[str, ...]:
        """The daemons ``up`` runs, in start order: no follower when Debezium feeds."""
        return tuple(d for d in DAEMONS if d != "cdc" or not self._debezium_fed())

    def _start_postgres(self) -> None:
        self.postgres.start()
        for database in (OPERATIONAL_DB, CATALOG_DB):
            self.postgres.ensure_database(database)
        apply_migrations(self.postgres.dsn(OPERATIONAL_DB), self.settings.sql_dir / "postgres")
        with psycopg.connect(self.postgres.dsn(OPERATIONAL_DB), autocommit=True) as conn:
            ensure_admin_token(conn, self.paths.admin_token)

    def _prepare_external(self) -> None:
        """Migrate the external operational database and keep this folder's admin token
        (the CLI's) in it: the one thing ``up --external`` writes besides logs."""
        dsn = self.settings.operational_dsn()
        apply_migrations(dsn, self.settings.sql_dir / "postgres")
        with psycopg.connect(dsn, autocommit=True) as conn:
            ensure_admin_token(conn, self.paths.admin_token)

    def _bootstrap_warehouse(self, *, reader_role: bool = True) -> None:
        """Create or upgrade the warehouse's tables and views; on DuckLake, then let the
        reader role read the catalog and the lineage role write its rows (DuckLake creates
        its catalog tables on first attach); carry lineage rows an upgrade set aside over.
        The config is read now: the embedded catalog's DSN carries the password that
        starting Postgres the first time writes."""
        config = self.settings.warehouse_config()
        with open_warehouse(config) as warehouse:
            warehouse.bootstrap()
        if config.backend == "ducklake" and reader_role:  # external: the operator's login
            self.postgres.ensure_reader_role(CATALOG_DB)
            self.postgres.ensure_lineage_role(CATALOG_DB)
            config = self.settings.warehouse_config()  # now with the lineage writer's login
        with (
            open_warehouse(config) as warehouse,
            psycopg.connect(self.settings.operational_dsn()) as conn,  # embedded or external
        ):
            carry_over_lineage(conn, warehouse)

    def _daemon(self, name: str) -> Daemon:
        args = {
            "service": ("serve",),
            "cdc": ("cdc", "follow"),
            "worker": ("worker", "--executor-id", STACK_WORKER_ID),
        }[name]
        return Daemon(
            name, (*args, "--state-dir", str(self.paths.root)), self.paths.logs / f"{name}.log"
        )

    def _ensure_daemon(self, name: str, entry: dict[str, Any] | None) -> dict[str, Any]:
        pid = (entry or {}).get("pid")
        if processes.is_alive(pid, self._marker()):
            return entry or {}
        if name == "service":
            self.paths.service_url.unlink(missing_ok=True)
        return {"pid": self._daemon(name).spawn()}

    def _wait_for_service(self, pid: int) -> None:
        timeout = self.settings.service.start_timeout_s
        log = self.paths.logs / "service.log"

        def probe(check: Callable[[], T | None]) -> Callable[[], T | None]:
            def guarded() -> T | None:
                if not processes.is_alive(pid, self._marker()):
                    raise StackError(
                        f"the service exited while starting{_how(pid)}:\n{_tail(log)}",
                        part="service",
                        log=str(log),
                    )
                return check()

            return guarded

        url = _wait_for(probe(self._service_url), timeout, "the service to bind its port", log)
        _wait_for(probe(lambda: _ready(url)), timeout, "the service to become ready", log)

    def _wait_for_cdc(self, pid: int) -> None:
        """Wait until the follower started as ``pid`` has taken its snapshot and streams, as
        it reports to Postgres."""
        log = self.paths.logs / "cdc.log"
        host = socket.gethostname()

        def streaming() -> bool | None:
            if not processes.is_alive(pid, self._marker()):
                raise StackError(
                    f"the CDC follower exited while starting{_how(pid)}:\n{_tail(log)}",
                    part="cdc",
                    log=str(log),
                )
            current = self._cdc_liveness()
            return (current.pid == pid and current.host == host and current.healthy) or None

        _wait_for(
            streaming, self.settings.service.start_timeout_s, "the CDC follower to stream", log
        )

    def _cdc_liveness(self) -> Liveness:
        return liveness_at(self.settings.operational_dsn(), self.settings.cdc.slot)

    def _cdc_status(self, pid: int | None) -> PartStatus:
        """The follower as Postgres sees it (``cdc/liveness.py``): its reports and its slot's
        replication connection, not the pid (a follower may run on another machine). When
        Debezium feeds, the connector's liveness by the warehouse's position."""
        if self._debezium_fed():
            slot = writer_slot(self.settings.warehouse_config(), "")
            if not slot.startswith(SLOT_PREFIX):
                waiting = "no request from Debezium Server yet (POST /v1/cdc/debezium)"
                return PartStatus(
                    True, {"source": "debezium", "state": "waiting", "reason": waiting}
                )
            live = liveness_at(self.settings.operational_dsn(), slot)
        else:
            live = self._cdc_liveness()
        figures = live.status or {}
        detail: dict[str, Any] = {
            "source": self.settings.cdc.source,
            "state": live.state,
            "pid": live.pid,
            "host": live.host,
            "lag_s": figures.get("lag_s"),
            "warehouse_lag_s": live.warehouse_lag_s,
            "position_lsn": live.position_lsn,
            "snapshot_id": figures.get("snapshot_id"),
            "rows_per_s": figures.get("rows_per_s"),
            "last_seen_s": live.last_seen_s,
            "last_advance_s": live.last_advance_s,
            "last_error": live.last_error,
            "last_error_at": live.last_error_at,
        }
        if not live.healthy:
            detail["reason"], detail["last_state"] = live.reason, live.reported_state
            detail["error"] = _cdc_error(live)
            if pid is not None:
                detail["log"] = str(self.paths.logs / "cdc.log")
        return PartStatus(live.healthy, detail)

    def _service_url(self) -> str | None:
        path = self.paths.service_url
        return path.read_text().strip() if path.exists() else None

    def _postgres_status(self, *, external: bool = False) -> PartStatus:
        if not external and not self.postgres.is_running():
            return PartStatus(False, {"error": "not running"})
        dsn = self.settings.operational_dsn() if external else self.postgres.dsn(OPERATIONAL_DB)
        try:
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                version = conn.execute("SHOW server_version").fetchone()
        except psycopg.Error as error:
            return PartStatus(False, {"error": str(error)})
        where = {"external": True} if external else {"socket_dir": str(self.paths.socket_dir)}
        return PartStatus(True, {"version": version[0] if version else None, **where})

    def _worker_status(self, pid: int | None) -> PartStatus:
        """The pipeline worker ``up`` started: running or not (more may run elsewhere)."""
        if not processes.is_alive(pid, self._marker()):
            return PartStatus(False, {"error": "not running"})
        return PartStatus(True, {"pid": pid, "executor_id": STACK_WORKER_ID})

    def _service_status(self, pid: int | None, url: str | None) -> PartStatus:
        if not processes.is_alive(pid, self._marker()) or url is None:
            return PartStatus(False, {"error": "not running"})
        try:
            response = httpx.get(f"{url}/readyz", timeout=5)
        except httpx.HTTPError as error:
            return PartStatus(False, {"pid": pid, "error": str(error)})
        checks = response.json().get("checks", {})
        return PartStatus(response.status_code == 200, {"pid": pid, "url": url, "checks": checks})

    # -- record ----------------------------------------------------------------------------

    def _marker(self) -> str:
        return str(self.paths.root)

    def _read_record(self) -> dict[str, Any]:
        path = self.paths.stack_file
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def _write_record(self, record: dict[str, Any]) -> None:
        temp = self.paths.stack_file.with_suffix(".tmp")
        temp.write_text(json.dumps(record, indent=2) + "\n")
        temp.replace(self.paths.stack_file)


def _cdc_error(live: Liveness) -> str:
    """The one-line error ``quarry status`` shows for a follower that is not streaming."""
    if live.state == "down":
        ended = live.reported_state == "failed" and live.last_error
        return f"not running: {live.last_error}" if ended else "not running"
    return live.reason or live.state


def _ready(url: str | None) -> bool | None:
    if url is None:
        return None
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200 or None
    except httpx.HTTPError:
        return None


def _how(pid: int) -> str:
    status = processes.exit_status(pid)
    return f" ({status})" if status else ""


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return "(no log)"
    text = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return text or f"({path} is empty)"


def _wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, log: Path) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}; see {log}")
