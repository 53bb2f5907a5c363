"""``python -m quarry``: the same command line as the ``quarry`` console script."""

from quarry.cli import main

main()
