"""The embedded PostgreSQL server: binaries from the pgserver wheel, data in the state folder.

Quarry drives ``initdb`` and ``pg_ctl`` itself rather than through ``pgserver.get_server`` so
that the server outlives the process that started it (``quarry up`` returns, the stack keeps
running) and so that ``wal_level = logical`` is set before the first start.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
import psycopg
from psycopg import sql

from quarry.errors import StackError
from quarry.stack.paths import StatePaths

# The unprivileged account Postgres runs under when Quarry runs as root (initdb refuses root).
# The same name pgserver uses, so both tools can share a machine.
SYSTEM_USER = "pgserver"
SUPERUSER = "postgres"
OPERATIONAL_DB = "quarry"
CATALOG_DB = "quarry_catalog"
# The login the service's warehouse reader uses for the DuckLake catalog: SELECT only, no
# superuser, so a query cannot reach server files through the catalog connection.
READER_ROLE = "quarry_reader"
# The login the service's lineage writer uses for the DuckLake catalog: it writes the
# catalog's rows (a lineage append is one DuckLake commit), creates nothing, no superuser.
LINEAGE_ROLE = "quarry_lineage"

# Written once into postgresql.conf by ``init``. Logical decoding needs wal_level=logical.
_SERVER_CONF = """
# --- Quarry ---
listen_addresses = ''
wal_level = logical
max_replication_slots = 16
max_wal_senders = 16
max_connections = 200
shared_buffers = 128MB
max_slot_wal_keep_size = 4GB
timezone = 'UTC'
"""


# Local socket only (listen_addresses is empty). The reader logs in without a password but may
# only reach the catalog database; everything else needs the superuser's password.
_HBA_RULES = """# Written by Quarry (quarry/stack/postgres.py).
local   {catalog}   {reader}   trust
local   all   all   scram-sha-256
local   replication   all   scram-sha-256
"""


def _bin(name: str) -> Path:
    # Located without importing pgserver: its import touches platformdirs and warns.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the pgserver wheel is not installed", part="postgres")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name


def _run_as_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class EmbeddedPostgres:
    """One Postgres server whose data directory is ``paths.pgdata``."""

    paths: StatePaths

    @property
    def log_file(self) -> Path:
        return self.paths.pgdata / "server.log"

    @property
    def password_file(self) -> Path:
        """The superuser's password (mode 0600), made at the first start."""
        return self.paths.pg_password

    def dsn(self, dbname: str = OPERATIONAL_DB, user: str = SUPERUSER) -> str:
        """A libpq connection string over the Unix socket. Every login but the catalog
        reader needs the password; see :meth:`_require_passwords`."""
        base = f"host={self.paths.socket_dir} user={user} dbname={dbname}"
        secret = self.paths.pg_lineage_password if user == LINEAGE_ROLE else self.password_file
        if user == READER_ROLE or not secret.exists():
            return base
        return f"{base} password={secret.read_text().strip()}"

    def is_initialized(self) -> bool:
        return (self.paths.pgdata / "PG_VERSION").exists()

    def is_running(self) -> bool:
        """Whether the postmaster named in ``postmaster.pid`` is alive. Read directly rather
        than through ``pg_ctl status``, which runs as the system user and fails whenever a
        parent folder of the data directory has lost its o+x bit."""
        try:
            first_line = (self.paths.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
            process = psutil.Process(int(first_line))
            return process.status() != psutil.STATUS_ZOMBIE and "postgres" in process.name()
        except (OSError, ValueError, psutil.Error):
            return False

    def init(self) -> None:
        """Create the data directory with ``initdb`` (idempotent)."""
        if self.is_initialized():
            return
        pgdata = self.paths.pgdata
        pgdata.mkdir(parents=True, exist_ok=True)
        self._hand_over(pgdata)
        self._run(
            [
                str(_bin("initdb")),
                "-D",
                str(pgdata),
                "--auth=trust",
                "-U",
                SUPERUSER,
                "--encoding=UTF8",
                "--no-instructions",
            ]
        )
        with (pgdata / "postgresql.conf").open("a") as conf:
            conf.write(_SERVER_CONF)

    def start(self) -> None:
        """Start the server and wait until it accepts connections (idempotent)."""
        self.init()
        if self.is_running():
            return
        self._hand_over(self.paths.pgdata)  # parents may have lost o+x since init
        socket_dir = self.paths.socket_dir
        socket_dir.mkdir(parents=True, exist_ok=True)
        self._hand_over(socket_dir)
        socket_dir.chmod(0o700)
        options = f"-k {socket_dir}"
        result = self._pg_ctl(
            ["-w", "-t", "60", "-l", str(self.log_file), "-o", options, "start"], check=False
        )
        if result.returncode != 0:
            raise StackError(
                f"PostgreSQL did not start: {result.stderr.strip() or result.stdout.strip()}; "
                f"see {self.log_file}",
                part="postgres",
                log=str(self.log_file),
            )
        self._require_passwords()

    def _require_passwords(self) -> None:
        """Replace initdb's trust-everyone rules once: every login needs a password except the
        catalog reader, which may only read the DuckLake catalog. Without this, any local
        process (or a warehouse query that reached DuckDB's postgres_scan) could log in as
        the superuser."""
        if self.password_file.exists():
            return
        password = secrets.token_urlsafe(24)
        temp = self.password_file.with_suffix(".tmp")
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(SUPERUSER), sql.Literal(password)
                )
            )
            descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(password + "\n")
            # Rewritten in place, so the file keeps its owner (the server's system user).
            with (self.paths.pgdata / "pg_hba.conf").open("w") as hba:
                hba.write(_HBA_RULES.format(catalog=CATALOG_DB, reader=READER_ROLE))
            conn.execute("SELECT pg_reload_conf()")
        temp.replace(self.password_file)

    def stop(self, mode: Literal["smart", "fast", "immediate"] = "fast") -> None:
        """Stop the server (idempotent). ``fast`` checkpoints first; ``immediate`` skips that
        and leaves recovery to the next start (for throwaway servers such as tests')."""
        if not self.is_running():
            return
        result = self._pg_ctl(["-w", "-t", "60", "-m", mode, "stop"], check=False)
        if result.returncode != 0:
            raise StackError(f"PostgreSQL did not stop: {result.stderr.strip()}", part="postgres")

    def ensure_database(self, name: str) -> None:
        """Create database ``name`` if it does not exist."""
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if exists.fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def ensure_reader_role(self, database: str) -> None:
        """A login that may only read ``database``'s tables, now and in the future."""
        role, db = sql.Identifier(READER_ROLE), sql.Identifier(database)
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,))
            if exists.fetchone() is None:
                conn.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
                    ).format(role)
                )
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, role))
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            for statement in (
                "ALTER ROLE {} SET statement_timeout = '60s'",
                "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
                "GRANT USAGE ON SCHEMA public TO {}",
                "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}",
                "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}",
            ):
                conn.execute(sql.SQL(statement).format(role))

    def ensure_lineage_role(self, database: str) -> None:
        """A login (with a password of its own, in the state folder) that may read and write
        the rows of ``database``'s tables, now and in the future, and create nothing."""
        secret = self.paths.pg_lineage_password
        if not secret.exists():
            temp = secret.with_suffix(".tmp")
            descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_urlsafe(24) + "\n")
            temp.replace(secret)
        password = sql.Literal(secret.read_text().strip())
        role, db = sql.Identifier(LINEAGE_ROLE), sql.Identifier(database)
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (LINEAGE_ROLE,))
            verb = "ALTER" if exists.fetchone() is not None else "CREATE"
            conn.execute(
                sql.SQL(
                    verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
                    "PASSWORD {}"
                ).format(role, password)
            )
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, role))
        rights = "SELECT, INSERT, UPDATE, DELETE"
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            for statement in (
                "GRANT USAGE ON SCHEMA public TO {}",
                f"GRANT {rights} ON ALL TABLES IN SCHEMA public TO {{}}",
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {rights} ON TABLES TO {{}}",
            ):
                conn.execute(sql.SQL(statement).format(role))

    def _pg_ctl(self, args: list[str], *, check: bool) -> subprocess.CompletedProcess[str]:
        command = [str(_bin("pg_ctl")), "-D", str(self.paths.pgdata), *args]
        return self._run(command, check=check)

    def _run(self, command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = SYSTEM_USER if _run_as_root() else None
        # pg_ctl start forks the postmaster: its stdout/stderr must not be our pipes, or the
        # call would wait for the server to exit. The server logs to its own file instead.
        result = subprocess.run(
            command,
            user=user,
            check=False,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            start_new_session=True,
        )
        if check and result.returncode != 0:
            raise StackError(
                f"{Path(command[0]).name} failed: {result.stderr.strip()}",
                part="postgres",
                command=command,
            )
        return result

    def _hand_over(self, folder: Path) -> None:
        """As root, give ``folder`` to the Postgres system user and open its parents, and
        those of the Postgres binaries, for traversal: initdb and the server refuse to run as
        root, and a checkout inside a private folder (``mktemp -d`` makes one) would hide the
        binaries in its virtual environment from that user."""
        if not _run_as_root():
            return
        entry = _ensure_system_user()
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        for parent in (*folder.parents, *_bin("initdb").parents):
            mode = parent.stat().st_mode
            if mode & 0o055 != 0o055:
                parent.chmod(mode | 0o055)


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise StackError(
                "running as root needs `useradd` to create the postgres system "
                f"user {SYSTEM_USER!r}",
                part="postgres",
            ) from None
        subprocess.run([useradd, "--system", "--no-create-home", SYSTEM_USER], check=True)
        return pwd.getpwnam(SYSTEM_USER)
