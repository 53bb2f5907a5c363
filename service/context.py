"""What a running service holds: settings plus handles to the parts it talks to.

Built once in ``create_app`` and reached by routes through ``api/deps.py``. Nothing connects
until first use.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psycopg

from service.settings import ServiceSettings
from warehouse.backends import open_warehouse
from warehouse.base import Warehouse


@dataclass
class ServiceContext:
    settings: ServiceSettings
    _warehouse: Warehouse | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new connection to the operational database; the caller closes it."""
        return psycopg.connect(self.settings.operational_dsn.get_secret_value(), connect_timeout=5)

    def warehouse(self) -> Warehouse:
        """The warehouse of the settings' backend, for reads only: the service never opens
        its writer."""
        with self._lock:
            if self._warehouse is None:
                self._warehouse = open_warehouse(self.settings.warehouse)
            return self._warehouse

    def close(self) -> None:
        with self._lock:
            if self._warehouse is not None:
                self._warehouse.close()
                self._warehouse = None
