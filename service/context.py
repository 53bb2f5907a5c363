"""What a running service holds: settings plus handles to the parts it talks to.

Built once in ``create_app`` and reached by routes through ``api/deps.py``. Nothing connects
until first use.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psycopg

from cdc.liveness import Liveness, read_liveness, unreadable
from manifests.objects import ManifestPlace
from pipeline.progress import RunTotals, pipeline_totals
from service.manifest_files import manifest_place
from service.settings import ServiceSettings
from warehouse.backends import open_warehouse
from warehouse.base import Warehouse
from warehouse.errors import WarehouseError

#: Seconds the slot of the warehouse's CDC writer is remembered (read from its position).
SLOT_CACHE_S = 60.0
#: TCP keepalives of each operational connection, on both ends: idle seconds, seconds between
#: probes, probes; and how long sent data may stay unacknowledged (``tcp_user_timeout``: the
#: bound once a reply to a gone peer is in flight, where keepalives do not apply). A replica
#: removed with its host sends neither FIN nor RST, and Postgres would keep its sessions (a
#: build's open transaction, its locks and snapshot among them) until the kernel gave up,
#: over two hours by default; with these the server drops them after about 25 s, rolling
#: back what they had not committed. The client's side lets a replica notice a Postgres host
#: that is gone. (All are ignored on a Unix socket.)
KEEPALIVE = (10, 5, 3)
USER_TIMEOUT_MS = 25_000
_SERVER_KEEPALIVE = (
    "SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; "
    "SET tcp_keepalives_count = {}; SET tcp_user_timeout = {}"
).format(*KEEPALIVE, USER_TIMEOUT_MS)


@dataclass
class ServiceContext:
    settings: ServiceSettings
    _warehouse: Warehouse | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _slot: tuple[str, float] | None = field(default=None, init=False)  # (slot, monotonic s)
    manifests: ManifestPlace = field(init=False)

    def __post_init__(self) -> None:
        self.manifests = manifest_place(self.settings)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new connection to the operational database, with :data:`KEEPALIVE` on both ends;
        the caller closes it."""
        idle, interval, count = KEEPALIVE
        conn = psycopg.connect(
            self.settings.operational_dsn.get_secret_value(),
            connect_timeout=5,
            keepalives=1,
            keepalives_idle=idle,
            keepalives_interval=interval,
            keepalives_count=count,
            tcp_user_timeout=USER_TIMEOUT_MS,
        )
        try:
            # SET, not a startup ``options``: a pooler such as PgBouncer refuses those.
            conn.execute(_SERVER_KEEPALIVE)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def warehouse(self) -> Warehouse:
        """The warehouse of the settings' backend, for reads and manifests' lineage: the
        service never opens its CDC writer, and appends lineage through the lineage
        writer's own login (``lineage_catalog_dsn`` / ``lineage_dsn``)."""
        with self._lock:
            if self._warehouse is None:
                self._warehouse = open_warehouse(self.settings.warehouse)
            return self._warehouse

    def cdc_liveness(self, conn: psycopg.Connection[tuple[object, ...]] | None = None) -> Liveness:
        """The judgement on the CDC writer that feeds the warehouse (``cdc/liveness.py``),
        read from Postgres on ``conn`` or a connection of its own; ``down`` with why when it
        cannot be read or nothing has fed the warehouse yet."""
        slot = self._cdc_slot()
        if slot is None:
            feeder = (
                "no request from Debezium Server yet"
                if self.settings.cdc_source == "debezium"
                else "nothing has fed it"
            )
            return Liveness("", "down", f"the warehouse has no CDC position: {feeder}")
        try:
            if conn is not None:
                return read_liveness(conn, slot)
            with self.connect() as own:
                return read_liveness(own, slot)
        except psycopg.Error as error:
            return unreadable(slot, error)

    def pipeline_totals(self) -> list[RunTotals]:
        """Every pipeline run's totals (``/metrics``), read on a connection of its own."""
        with self.connect() as conn:
            return pipeline_totals(conn)

    def _cdc_slot(self) -> str | None:
        """The slot of the warehouse's position, remembered for ``SLOT_CACHE_S``."""
        known = self._slot
        if known is not None and time.monotonic() - known[1] < SLOT_CACHE_S:
            return known[0]
        try:
            position = self.warehouse().position()
        except WarehouseError:
            return known[0] if known is not None else None
        if position is None:
            return None
        self._slot = (position.slot, time.monotonic())
        return position.slot

    def close(self) -> None:
        with self._lock:
            if self._warehouse is not None:
                self._warehouse.close()
                self._warehouse = None
