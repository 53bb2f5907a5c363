"""Where everything lives inside a state folder (see docs/architecture.md)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from loader.layout import NodeLayout

# A Unix socket path must fit in sockaddr_un.sun_path (108 bytes on Linux, NUL included).
_MAX_SOCKET_PATH = 100
_SOCKET_NAME = ".s.PGSQL.5432"


@dataclass(frozen=True)
class StatePaths(NodeLayout):
    """The layout of one state folder (a node's, see :class:`loader.layout.NodeLayout`, plus
    the embedded stack's own folders). ``root`` is absolute."""

    @classmethod
    def at(cls, root: Path | str) -> StatePaths:
        return cls(Path(root).expanduser().resolve())

    @property
    def pgdata(self) -> Path:
        return self.root / "pg"

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse"

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pipeline_work(self) -> Path:
        """The pipeline workers' step files, one folder per workflow."""
        return self.root / "pipeline" / "work"

    @property
    def run(self) -> Path:
        """Runtime files of the stack's processes (URLs, status files)."""
        return self.root / "run"

    @property
    def service_port(self) -> Path:
        """The port the service bound last; it takes it again at its next start if free."""
        return self.root / "service.port"

    @property
    def service_url(self) -> Path:
        """The URL the service bound, published once it listens."""
        return self.run / "service.url"

    @property
    def cdc_status(self) -> Path:
        """The CDC follower's status document, rewritten at least once a second."""
        return self.run / "cdc-status.json"

    @property
    def pg_password(self) -> Path:
        """The Postgres superuser's password (mode 0600), made at the first start."""
        return self.root / "pg-password"

    @property
    def pg_lineage_password(self) -> Path:
        """The password of the catalog's lineage writer (mode 0600), made with its role."""
        return self.root / "pg-lineage-password"

    @property
    def stack_file(self) -> Path:
        return self.root / "stack.json"

    @property
    def admin_token(self) -> Path:
        return self.root / "admin.token"

    @property
    def socket_dir(self) -> Path:
        """Postgres socket folder: inside the state folder when the path is short enough,
        else a folder under /tmp named by a hash of the state folder."""
        local = self.root / "pg-socket"
        if len(str(local / _SOCKET_NAME)) <= _MAX_SOCKET_PATH:
            return local
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return Path("/tmp") / f"quarry-{digest}"  # noqa: S108 - short, private, per-state-dir

    def ensure(self) -> None:
        """Create the folders Quarry itself writes to (pgdata is made by initdb)."""
        for folder in (
            self.root,
            self.warehouse,
            self.objects,
            self.manifests,
            self.cache,
            self.checkpoints,
            self.logs,
            self.run,
        ):
            folder.mkdir(parents=True, exist_ok=True)


def find_state_dir(start: Path, name: str = ".quarry") -> Path | None:
    """The nearest ``name/`` folder that holds a stack (its ``stack.json``), in ``start`` or
    a parent of it, as the exploration notebook finds it; ``None`` when there is none."""
    here = start.resolve()
    for folder in (here, *here.parents):
        candidate = folder / name
        if (candidate / "stack.json").is_file():
            return candidate
    return None
