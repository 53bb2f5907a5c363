"""The ``quarry`` command line: one entry, subcommands, one exception boundary.

Every command takes ``--state-dir`` (default ``.quarry/``, also ``QUARRY_STATE_DIR``);
status-like commands take ``--json``. ``--debug`` re-raises errors with their traceback.
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


def main() -> None:
    """Console-script entry: map Quarry errors to messages and exit codes."""
    debug = "--debug" in sys.argv[1:]
    try:
        cli(standalone_mode=False)
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
