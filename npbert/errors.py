"""The exceptions npbert raises for what is not a bug, so the CLI can tell them from one."""


class InputError(ValueError):
    """Bad input: a wrong id, shape, file or model. The message names what and where."""


def first_line(error: BaseException) -> str:
    """The first line of a library's error message (some run to many), or its type's name."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class WorkerLost(RuntimeError):
    """A worker of the corpus job ended before its chunk was done (killed, out of memory):
    the run stops, and the shards committed so far stay for --resume."""
