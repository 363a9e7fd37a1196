"""What npbert raises and warns of for what is not a bug, so that a caller can tell them from one.

A message names the caller's own arguments in braces, by npbert's Python names: `{directory}`,
`{resume=True}`, `{truncation=True}`. str() shows them so ("pass resume=True to continue");
the command line shows its options instead ("pass --resume"), by its one table
(npbert.cli.errors). A message names what is wrong and where, and what to do where that is
known.
"""

import re
import warnings

PARAMETER = re.compile(r"\{([a-z_]+(?:=[\w']+)?)\}")


def spelled(message: str, spelling=None) -> str:
    """`message` with each argument it names in braces spelled by `spelling` (name -> text):
    as Python names it, without the braces, unless one is given."""
    return PARAMETER.sub(lambda m: m[1] if spelling is None else spelling(m[1]), message)


class NpbertError(Exception):
    """An error of npbert's: `message` as written (arguments in braces); further fields
    (path, value, ...) as attributes where the raiser gives them."""

    def __init__(self, message: str, **fields):
        super().__init__(message)
        self.message = message
        self.__dict__.update(fields)

    def __str__(self) -> str:
        return spelled(self.message)


class InputError(NpbertError, ValueError):
    """Bad input: a wrong id, shape, file, model or setting. The message names what and where."""


class DamagedCorpus(InputError):
    """A corpus directory whose index.json disagrees with itself (a shard missing from its
    list, counts that do not add up): read as it is, texts would be missing or repeated
    without a word. Fields: path (the index.json), problem (the first disagreement found)."""


class WorkerLost(NpbertError, RuntimeError):
    """A worker of the corpus job ended before its chunk was done (killed, out of memory):
    the run stops, and the shards committed so far stay to be resumed."""


class NpbertWarning(UserWarning):
    """Something the caller should know that does not stop the work: a file left out of a
    corpus, a Hub request that is slow to answer. Its message names arguments as errors do."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return spelled(self.message)


def warn(message: str) -> None:
    """Warn of `message` (arguments in braces) as an NpbertWarning."""
    warnings.warn(NpbertWarning(message), stacklevel=3)


def first_line(error: BaseException) -> str:
    """The first line of a library's error message (some run to many), or its type's name."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
