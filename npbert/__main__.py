"""The npbert command: `npbert ...` (the console script) and `python -m npbert ...`."""

import sys


def main() -> int:
    """npbert.cli.main, imported here so that a Ctrl-C while NumPy and the rest load (a
    fifth of a second) ends the command as one later does, without a traceback."""
    try:
        from npbert.cli import main as command

        return command()
    except KeyboardInterrupt:  # cli.main handles its own; this is before it could
        print("npbert: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as cli.main returns


if __name__ == "__main__":
    sys.exit(main())
