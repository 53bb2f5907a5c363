"""The command line's exit codes, and the one table from an error to its exit code and line.

``quarry/cli.py`` ``main`` is the one exception boundary; it asks :func:`explain` what an error
means. An expected error (a package's own error class, a lost connection, invalid settings)
becomes one line that says what to do and a documented exit code; anything else is a bug:
:func:`record_unexpected` writes its traceback to a log file and the line names that file
(exit 70). The table of codes is :data:`EXIT_CODES`, shown by ``quarry --help`` and in
``docs/cli.md``.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pydantic

from cdc.errors import CdcError
from curation.errors import CurationError
from curation.errors import NotFoundError as CurationNotFound
from episodes.errors import EpisodeError
from loader.errors import LoaderError, ObjectNotFoundError
from manifests.errors import ManifestError, ManifestNotFoundError
from quarry.errors import QuarryError
from service.errors import NotFoundError as ServiceNotFound
from service.errors import ServiceError
from trainer.errors import ConfigError as TrainerConfigError
from trainer.errors import TrainerError
from warehouse.errors import WarehouseError

OK = 0
FAILED = 1
BAD_INPUT = 2
UNAVAILABLE = 3
NOT_FOUND = 4
REFUSED = 5
UNEXPECTED = 70
INTERRUPTED = 130

EXIT_CODES: tuple[tuple[str, str], ...] = (
    ("0", "done"),
    ("1", "the command ran and failed (the line says what failed)"),
    ("2", "bad input or settings: fix what the line names"),
    ("3", "unreachable service, Postgres or warehouse: see `quarry status`, retry"),
    ("4", "no such manifest (in every command that takes one), episode, label, token or file"),
    ("5", "the service refused the token (missing, revoked, lacks the scope)"),
    ("64-74", "`quarry train`: the job's exit code (trainer.errors.ExitCode)"),
    ("70", "unexpected error (a bug): the line names the log with its traceback"),
    ("130", "interrupted"),
)
"""(code, meaning) of every exit status of ``quarry``; ``docs/cli.md`` has the same table."""

# The settings models a command builds from flags and QUARRY_* variables: their validation
# errors are bad settings, not bugs (pydantic names the model in ``ValidationError.title``).
_SETTINGS_MODELS = frozenset({"Settings", "FollowerSettings", "ServiceSettings"})
_UP_HINT = "is the stack up? `quarry status` shows each part, `quarry up` starts it"
_PACKAGE_ERRORS = (
    ServiceError,
    CurationError,
    EpisodeError,
    ManifestError,
    LoaderError,
    WarehouseError,
    CdcError,
)
_NOT_FOUND = (ServiceNotFound, CurationNotFound, ManifestNotFoundError, ObjectNotFoundError)


@dataclass(frozen=True)
class Exit:
    """What the command line prints (``error: <line>``) and the status it exits with."""

    code: int
    line: str


def explain(error: BaseException) -> Exit | None:
    """The exit code and one line for an expected error; ``None`` for anything else (a bug)."""
    if isinstance(error, QuarryError):
        return Exit(error.exit_code, one_line(error.message))
    if isinstance(error, TrainerError):
        return _trainer(error)
    if isinstance(error, _PACKAGE_ERRORS):
        return _package(error)
    if isinstance(error, httpx.TransportError):
        return Exit(
            UNAVAILABLE, f"cannot reach {_where(error)}: {one_line(str(error))}; {_UP_HINT}"
        )
    if isinstance(error, psycopg.OperationalError):
        return Exit(UNAVAILABLE, f"cannot reach the database: {one_line(str(error))}; {_UP_HINT}")
    if isinstance(error, ConnectionError):
        return Exit(UNAVAILABLE, f"connection lost: {one_line(str(error))}; {_UP_HINT}")
    if isinstance(error, pydantic.ValidationError) and error.title in _SETTINGS_MODELS:
        return Exit(BAD_INPUT, _settings(error))
    return None


def _trainer(error: TrainerError) -> Exit:
    if isinstance(error, TrainerConfigError):
        hint = "fix the --set/--config value (settings: docs/trainer.md)"
        return Exit(BAD_INPUT, f"{one_line(str(error))}; {hint}")
    return Exit(int(error.exit_code), one_line(str(error)))


def _package(error: Exception) -> Exit:
    text = one_line(str(error))
    if isinstance(error, _NOT_FOUND):
        return Exit(NOT_FOUND, text)
    if getattr(error, "retryable", False):
        if isinstance(error, WarehouseError):
            return Exit(
                UNAVAILABLE,
                f"{text}; check the warehouse settings (QUARRY_WAREHOUSE__*) "
                "and that the warehouse is up",
            )
        return Exit(UNAVAILABLE, f"{text}; it may work on a retry: {_UP_HINT}")
    return Exit(BAD_INPUT, text)


def _where(error: httpx.TransportError) -> str:
    try:
        url = error.request.url
    except RuntimeError:  # an error raised without its request
        return "the service"
    return f"the service at {url.scheme}://{url.netloc.decode()}"


def _settings(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors()[:3]:
        names = [str(part) for part in item["loc"] if isinstance(part, str)]
        variable = "QUARRY_" + "__".join(names).upper()
        problems.append(f"{'.'.join(names) or 'settings'}: {item['msg']} ({variable})")
    more = f" (and {error.error_count() - 3} more)" if error.error_count() > 3 else ""
    return f"invalid settings: {'; '.join(problems)}{more}; fix the variable or flag"


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks folded to single spaces."""
    return " ".join(text.split())


def record_unexpected(error: BaseException, argv: list[str], state_dir: Path | None) -> Path:
    """Append the traceback of ``error`` to ``<state>/logs/cli-errors.log`` (a new temp file
    when no state folder exists yet) and return that file.

    :raises OSError: neither file could be written.
    """
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    entry = (
        f"=== {stamp} pid {os.getpid()}: quarry {' '.join(argv)}\n"
        + "".join(traceback.format_exception(error))
        + "\n"
    )
    if state_dir is not None and state_dir.is_dir():
        path = state_dir / "logs" / "cli-errors.log"
        try:
            path.parent.mkdir(exist_ok=True)
            with path.open("a") as log:
                log.write(entry)
            return path
        except OSError:
            pass  # a read-only or full state folder: the temp file below gets it
    handle, name = tempfile.mkstemp(prefix="quarry-error-", suffix=".log")
    with os.fdopen(handle, "w") as log:
        log.write(entry)
    return Path(name)
