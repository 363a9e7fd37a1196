"""The npbert command: `npbert ...` (the console script) and `python -m npbert ...`."""

import atexit
import os
import sys


def main() -> int:
    """npbert.cli.main, ended by finish."""
    from npbert.cli import main as command

    return finish(command())


def finish(code: int) -> int:
    """The command's exit status; where the command ran on Ray, the process ends here with it.

    Ray's core worker keeps a thread running past ray.shutdown, and it crashed the process in
    the interpreter's teardown (SIGSEGV in Ray's TaskManager::RecordMetrics): in 3 of 10 runs
    stopped by Ctrl-C (exit 139), and in a completed run (a test's resumed run, exit -11, once
    in six runs of the suite). By then the run has cleaned up and said what it did, so the
    process ends after the exit handlers (CPython's atexit._run_exitfuncs: Ray's stop the
    processes it started) but without the teardown.
    """
    if "ray._raylet" in sys.modules:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with it closed (2>&-)
                stream.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
