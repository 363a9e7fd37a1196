"""The npbert command: `npbert ...` (the console script) and `python -m npbert ...`."""

import sys

from npbert.cli import main as command
from npbert.cli.errors import finish


def main() -> int:
    """npbert.cli.main, ended by finish."""
    return finish(command())


if __name__ == "__main__":
    sys.exit(main())
