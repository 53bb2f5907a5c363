"""The ``quarry`` command line: one entry, subcommands, one exception boundary.

Every command takes ``--state-dir`` (default ``.quarry/``, also ``QUARRY_STATE_DIR``);
status-like commands take ``--json``. ``quarry --debug COMMAND`` re-raises errors with their
traceback instead of the one line :func:`main` prints.
"""

from __future__ import annotations

import sys

import click

from quarry.commands import cache, cdc, curate, demo, episodes, ingest, stack, tokens, train
from quarry.errors import QuarryError


@click.group()
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """Quarry: from robot recordings to training batches, through SQL."""


for _module in (stack, ingest, episodes, cdc, curate, cache, train, demo, tokens):
    _module.register(cli)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry, the one exception boundary: map errors to one line and an exit
    code (``--debug``, the group's option, re-raises them instead)."""
    debug = False
    try:
        with cli.make_context("quarry", list(sys.argv[1:] if argv is None else argv)) as ctx:
            debug = bool(ctx.params.get("debug"))
            cli.invoke(ctx)
    except click.exceptions.Exit as done:  # --help, --version
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except QuarryError as error:
        if debug:
            raise
        click.echo(f"error: {error.message}", err=True)
        sys.exit(error.exit_code)
