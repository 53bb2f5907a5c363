"""The ``quarry`` command line: one entry, subcommands, one exception boundary.

Every command takes ``--state-dir`` (default ``.quarry/``, also ``QUARRY_STATE_DIR``);
status-like commands take ``--json``. ``--debug``, anywhere on the command line, re-raises
errors with their traceback instead of the one line :func:`main` prints. The exit codes are
:data:`quarry.exits.EXIT_CODES` (``quarry --help`` lists them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from quarry.commands import (
    cache,
    cdc,
    corpus,
    curate,
    demo,
    episodes,
    ingest,
    labels,
    lerobot,
    pipeline,
    sql,
    stack,
    tokens,
    train,
)
from quarry.commands._common import STATE_DIR_KEY
from quarry.exits import EXIT_CODES, INTERRUPTED, UNEXPECTED, explain, one_line, record_unexpected

DEBUG = "--debug"
_EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code:<6} {what}" for code, what in EXIT_CODES)


@click.group(epilog=_EPILOG)
@click.option(DEBUG, is_flag=True, help="Show tracebacks instead of one-line errors (anywhere).")
def cli(debug: bool) -> None:
    """Quarry: from robot recordings to training batches, through SQL."""


for _module in (
    stack,
    ingest,
    episodes,
    labels,
    cdc,
    curate,
    sql,
    corpus,
    cache,
    train,
    demo,
    tokens,
    lerobot,
    pipeline,
):
    _module.register(cli)


def split_debug(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether ``--debug`` is on the command line (before a ``--``), and the rest of it."""
    end = argv.index("--") if "--" in argv else len(argv)
    rest = [arg for arg in argv[:end] if arg != DEBUG] + argv[end:]
    return len(rest) != len(argv), rest


def main(argv: list[str] | None = None) -> None:
    """Console-script entry, the one exception boundary: an expected error becomes one line and
    its exit code, an unexpected one exit 70 with its traceback in a log file (``--debug``
    re-raises both instead)."""
    debug, args = split_debug(list(sys.argv[1:] if argv is None else argv))
    meta: dict[str, object] = {}
    try:
        with cli.make_context("quarry", args) as ctx:
            meta = ctx.meta
            cli.invoke(ctx)
    except click.exceptions.Exit as done:  # --help, --version
        sys.exit(done.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(INTERRUPTED)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except Exception as error:
        if debug:
            raise
        fail(error, args, meta.get(STATE_DIR_KEY))


def fail(error: Exception, args: list[str], state_dir: object) -> NoReturn:
    """Print the one line for ``error`` and exit with its code."""
    known = explain(error)
    if known is not None:
        click.echo(f"error: {known.line}", err=True)
        sys.exit(known.code)
    folder = state_dir if isinstance(state_dir, Path) else None
    what = f"{type(error).__name__}: {one_line(str(error))}"
    try:
        log = record_unexpected(error, args, folder)
    except OSError as unwritable:  # no file could hold it: the traceback goes to stderr
        click.echo(f"error: unexpected {what} (no log file: {unwritable})", err=True)
        raise error from None
    click.echo(
        f"error: unexpected {what}; this is a bug: its traceback is in {log} "
        f"(rerun with {DEBUG} to see it here)",
        err=True,
    )
    sys.exit(UNEXPECTED)
