"""How the command ends: every error as one line on standard error and an exit status, in one
table; NumPy's warnings about the weights as one line; Ctrl-C, SIGTERM and a closed pipe.
"""

import logging
import os
import signal
import sys
import warnings
from pathlib import Path

import numpy as np

from npbert.cli.options import PATH_OPTIONS, flag
from npbert.cli.output import flush_stdout
from npbert.errors import InputError, WorkerLost


class Said(logging.Handler):
    """What npbert's modules log (a warning, such as hub's Range fallback), shown as the CLI's
    other warnings are: one line on standard error, whichever stream that is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"npbert: warning: {record.getMessage()}", file=sys.stderr)


def say_logged() -> None:
    """Show npbert's logged warnings through Said (once, however often main runs), not also
    through whatever handlers the root logger has."""
    logger = logging.getLogger("npbert")
    if not any(isinstance(handler, Said) for handler in logger.handlers):
        logger.addHandler(Said(logging.WARNING))
        logger.propagate = False


def run(args) -> int:
    """The command, its errors turned into one line and an exit status."""
    say_logged()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            code = args.run(args)
        say_warnings(caught)  # after a command that ended well: an error says enough
        flush_stdout()
        return code
    except BrokenPipeError:
        return reader_gone()
    except InputError as error:
        print(f"npbert: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # an unreadable input or unwritable output file
        print(f"npbert: error: {os_error(args, error)}", file=sys.stderr)
        return 2
    except WorkerLost as error:
        print(f"npbert: error: {error}", file=sys.stderr)
        return 1
    except MemoryError as error:  # NumPy's names the array it could not allocate
        reason = str(error) or "no more could be allocated"
        print(f"npbert: error: out of memory ({reason})", file=sys.stderr)
        return 2 if getattr(args, "verdict", False) else 1  # compare's and explain's 1 is one
    except Terminated:
        print("npbert: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("npbert: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def os_error(args, error: OSError) -> str:
    """The OS's reason, with the option that named the file where one did ("--out F: ...")."""
    reason = error.strerror or str(error)
    if not error.filename:  # standard output
        return reason
    path = Path(os.fsdecode(error.filename))
    for name in PATH_OPTIONS:
        given = getattr(args, name, None)
        if not isinstance(given, str | os.PathLike):
            continue
        option = flag(name)
        if path == Path(given):
            return f"{option} {path}: {reason}"
        if Path(given) in path.parents:  # a file in the directory the option names
            return f"{option} {given}: {reason} ({path})"
    return f"{reason}: {path}"


# Where the layer is computed (npbert.layer), and the CLI, whose own "NaN or Inf in the output"
# warning joins them: NumPy's warnings from these lines are about the weights, and so are those
# NumPy gives from its own files (a mean's sum overflowing: explain, vectors).
PACKAGE = os.path.dirname(os.path.dirname(__file__))
LAYER_FILES = tuple(os.path.join(PACKAGE, part) + os.sep for part in ("layer", "cli"))


NUMPY_FILES = os.path.dirname(np.__file__) + os.sep


def say_warnings(caught: list) -> None:
    """NumPy's RuntimeWarnings from the layer (NaN or Inf met, float32 overflowed), which
    name a line of npbert, as one line that says what they mean for the output; other
    warnings as they are."""
    numpy_said = [
        w
        for w in caught
        if issubclass(w.category, RuntimeWarning)
        and w.filename.startswith((*LAYER_FILES, NUMPY_FILES))
    ]
    for other in (w for w in caught if w not in numpy_said):
        warnings.showwarning(other.message, other.category, other.filename, other.lineno)
    if numpy_said:
        warn_float32(
            "NaN, Inf or a float32 overflow in the layer: the checkpoint's tensors hold NaN or "
            "Inf, or values too large for float32"
        )


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, a batch scheduler ending the job): the command stops and
    cleans up as it does on Ctrl-C, where Python's default would end it at once and leave a
    corpus run's lock and pending files behind."""


def interrupted(signum, frame) -> None:
    """Ctrl-C: stop, and let nothing interrupt the cleanup that follows (workers killed,
    pending files removed): a second Ctrl-C in the middle of it left workers running, and the
    process waiting for them. The command exits once it is done."""
    ignore_stopping()
    raise KeyboardInterrupt


def terminated(signum, frame) -> None:
    """SIGTERM: as interrupted, said as Terminated."""
    ignore_stopping()
    raise Terminated


def ignore_stopping() -> None:
    for number, _, handler in STOPPING:
        if signal.getsignal(number) is handler:
            signal.signal(number, signal.SIG_IGN)


# (signal, Python's default handler, the CLI's), for main to install and restore
STOPPING = [
    (signal.SIGINT, signal.default_int_handler, interrupted),
    (signal.SIGTERM, signal.SIG_DFL, terminated),
]


def reader_gone() -> int:
    """End as ls, cat and git do when the reader of their output goes away (`npbert ... |
    head -1`): killed by SIGPIPE, which the shell reports as status 141, with nothing on
    stderr. Scripts with `set -o pipefail` already know 141 from those tools; 0 would claim
    the output was all read. Python ignores SIGPIPE and raises BrokenPipeError instead, so
    the default action is restored and the signal raised; stdout goes to /dev/null first,
    so that nothing tries to flush the rest."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.raise_signal(signal.SIGPIPE)
    return 128 + signal.SIGPIPE  # what the shell reports; not reached, the signal ends us


def warn_float32(cause: str) -> None:
    """One line on stderr, in place of NumPy's RuntimeWarnings, where float32 cannot give
    every token a number: the output is still written, as torch would compute it."""
    print(
        f"npbert: warning: {cause} (npbert inspect shows them), and the tokens that use them "
        "embed as NaN, Inf or wrong values (embed(..., dtype=np.float64) computes the large "
        "ones)",
        file=sys.stderr,
    )


def warn_ahead(trouble: str) -> None:
    """warn_float32 before a job, for float32_trouble's finding, in place of NumPy's warnings
    during it."""
    warn_float32(trouble)
    warnings.simplefilter("ignore", RuntimeWarning)  # said: until run() ends


def finish(code: int) -> int:
    """The command's exit status; where the command ran on Ray, the process ends here with it.

    Ray's core worker keeps a thread running past ray.shutdown, and it crashed the process in
    the interpreter's teardown (SIGSEGV in Ray's TaskManager::RecordMetrics). By then the run
    has shut Ray down, cleaned up and said what it did: the process ends without the teardown.
    """
    if "ray._raylet" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with it closed (2>&-)
                stream.flush()
        os._exit(code)
    return code
