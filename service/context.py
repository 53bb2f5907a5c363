"""What a running service holds: settings plus handles to the parts it talks to.

Built once in ``create_app`` and reached by routes through ``api/deps.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from service.postgres import OPERATIONAL_DB, EmbeddedPostgres
from service.settings import Settings


@dataclass
class ServiceContext:
    settings: Settings

    @property
    def postgres(self) -> EmbeddedPostgres:
        return EmbeddedPostgres(self.settings.paths)

    def operational_dsn(self) -> str:
        return self.postgres.dsn(OPERATIONAL_DB)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new connection to the operational database; the caller closes it."""
        return psycopg.connect(self.operational_dsn(), connect_timeout=5)
