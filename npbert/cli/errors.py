"""How the command ends: every error as one line on standard error and an exit status, in one
table; NumPy's warnings about the weights as one line; Ctrl-C, SIGTERM, SIGHUP and a closed
pipe.
"""

import contextlib
import os
import signal
import sys
import warnings
from pathlib import Path

import numpy as np

from npbert.cli.options import PATH_OPTIONS, flag
from npbert.cli.output import flush_stdout
from npbert.errors import InputError, NpbertWarning, WorkerLost, spelled

# How the command line spells the arguments a library message names in braces (npbert.errors):
# a Python name and its option, where the option is not the name with dashes.
OPTIONS = {
    "source": "--input",
    "directory": "--out",
    "truncation=True": "--truncate",
    "engine='ray'": "--engine ray",
    "local_files_only=True": "--offline",
    "input_ids": "--ids-file",
    "attention_mask": "--attention-mask-file",
    "token": "`npbert fetch --token`",
    "embed_stages": "`npbert embed --stages`",
}


def as_options(message: str) -> str:
    """A library message with the arguments it names spelled as this command's options."""
    return spelled(message, lambda name: OPTIONS.get(name) or flag(name.split("=")[0]))


def out_of_memory(args, error: MemoryError) -> str:
    return f"out of memory ({error or 'no more could be allocated'})"


# What each error a command may meet becomes: its exit status (None: 1, but 2 for a command
# whose 1 is a verdict) and its one line, first match first. Anything else is a bug: a traceback.
ERRORS = [
    (InputError, 2, lambda args, error: as_options(error.message)),
    (OSError, 2, lambda args, error: os_error(args, error)),  # unreadable input, unwritable output
    (WorkerLost, 1, lambda args, error: as_options(error.message)),
    (MemoryError, None, out_of_memory),  # NumPy's names the array it could not allocate
]


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, a batch scheduler ending the job): the command stops and
    cleans up as it does on Ctrl-C, where Python's default would end it at once and leave a
    corpus run's lock and pending files behind."""


class HungUp(Terminated):
    """SIGHUP (the terminal closed, an ssh session dropped): stops as SIGTERM does."""


# A stop is not an error: (its type, what is said, the status: 128 + the signal's number)
STOPS = [
    (HungUp, "hung up", 128 + signal.SIGHUP),
    (Terminated, "terminated", 128 + signal.SIGTERM),
    (KeyboardInterrupt, "interrupted", 128 + signal.SIGINT),
]


def run(args) -> int:
    """The command, its errors turned into one line and an exit status (ERRORS)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            layer_said, python = [], warnings.showwarning
            warnings.showwarning = lambda *shown: show_warning(layer_said, python, *shown)
            code = args.run(args)
        if layer_said:  # after a command that ended well: an error says enough
            warn_float32(NUMPY_SAID)
        flush_stdout()
        return code
    except BrokenPipeError:
        return reader_gone()
    except tuple(kind for kind, _, _ in ERRORS + STOPS) as error:
        return ended(args, error)


def ended(args, error: BaseException) -> int:
    """Say the error or stop in one line; its exit status."""
    for kind, said, status in STOPS:
        if isinstance(error, kind):
            with contextlib.suppress(OSError):  # a terminal that hung up: nobody to tell
                print(f"npbert: {said}", file=sys.stderr)
            return status
    kind, status, line = next(entry for entry in ERRORS if isinstance(error, entry[0]))
    print(f"npbert: error: {line(args, error)}", file=sys.stderr)
    return status or (2 if getattr(args, "verdict", False) else 1)


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


NUMPY_SAID = (
    "NaN, Inf or a float32 overflow in the layer: the checkpoint's tensors hold NaN or Inf, or "
    "values too large for float32"
)


def show_warning(layer_said: list, python, message, category, filename, lineno, *rest) -> None:
    """Every warning in one place: npbert's at once, as one line with the command's options;
    NumPy's from the layer (NaN or Inf met, float32 overflowed) kept, to be said as one line
    of what they mean for the output; any other as Python shows it."""
    if isinstance(message, NpbertWarning):
        print(f"npbert: warning: {as_options(message.message)}", file=sys.stderr)
    elif issubclass(category, RuntimeWarning) and filename.startswith((*LAYER_FILES, NUMPY_FILES)):
        layer_said.append(message)
    else:
        python(message, category, filename, lineno, *rest)


def interrupted(signum, frame) -> None:
    """Ctrl-C: stop, and let nothing interrupt the cleanup that follows (workers killed,
    pending files removed): a second Ctrl-C in the middle of it left workers running, and the
    process waiting for them. The command exits once it is done."""
    ignore_stopping()
    raise KeyboardInterrupt


def terminated(signum, frame) -> None:
    """SIGTERM, SIGHUP: as interrupted, said as Terminated or HungUp."""
    ignore_stopping()
    raise HungUp if signum == signal.SIGHUP else Terminated


def ignore_stopping() -> None:
    for number, _, handler in STOPPING:
        if signal.getsignal(number) is handler:
            signal.signal(number, signal.SIG_IGN)


# (signal, Python's default handler, the CLI's), for main to install and restore
STOPPING = [
    (signal.SIGINT, signal.default_int_handler, interrupted),
    (signal.SIGTERM, signal.SIG_DFL, terminated),
    (signal.SIGHUP, signal.SIG_DFL, terminated),  # not where ignored (nohup)
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
