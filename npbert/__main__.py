"""The npbert command: `npbert ...` (the console script) and `python -m npbert ...`."""

import atexit
import os
import signal
import sys
import threading


def main() -> int:
    """npbert.cli.main, imported here so that a Ctrl-C while NumPy and the rest load (a
    fifth of a second) ends the command as one later does, without a traceback."""
    command = load_cli()
    try:
        if command is None:
            raise KeyboardInterrupt
        code = command()
    except KeyboardInterrupt:  # while it loaded, or before cli.main's own handling began
        print("npbert: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as cli.main returns
    return finish(code)


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


def load_cli():
    """npbert.cli.main, or None if Ctrl-C came while it loaded. The Ctrl-C is held until the
    imports end: raised inside one, NumPy's turned it into an ImportError ("your NumPy install
    is broken", exit 1) in 3 of 80 tries. An ignored SIGINT (a job started with &) stays so."""
    pressed = []
    ours = threading.current_thread() is threading.main_thread()  # where signals can be set
    ours = ours and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ours:
        signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        from npbert.cli import main as command
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return None if pressed else command


if __name__ == "__main__":
    sys.exit(main())
