"""The npbert command: `npbert ...` (the console script) and `python -m npbert ...`."""

import atexit
import os
import sys

STOPPED = (130, 143)  # what cli.main returns on Ctrl-C and SIGTERM: 128 + the signal


def main() -> int:
    """npbert.cli.main, imported here so that a Ctrl-C while NumPy and the rest load (a
    fifth of a second) ends the command as one later does, without a traceback."""
    try:
        from npbert.cli import main as command

        code = command()
    except KeyboardInterrupt:  # cli.main handles its own; this is before it could
        print("npbert: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as cli.main returns
    if code in STOPPED and "ray._raylet" in sys.modules:
        # A Ray run stopped by a signal: Ray's core worker keeps a thread running past
        # ray.shutdown, which crashed the process as it ended (SIGSEGV in Ray's
        # TaskManager::RecordMetrics, 3 of 10 Ctrl-Cs, exit 139). The run has cleaned up
        # and said so; the process ends here, after the exit handlers (Ray's stop the
        # processes it started) but without the interpreter's teardown.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
