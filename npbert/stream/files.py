"""The corpus job's input files: a file, a directory of them, or standard input.

.txt      one text a line (\\n or \\r\\n; a lone \\r is refused); an empty line is an empty text
.jsonl    one JSON object a line: a string "text" and an optional string "pair"
.parquet  a string column "text" and an optional "pair" (needs pyarrow)
DIR       its .txt, .jsonl and .parquet files in name order, one after another (a warning names
          its subdirectories and other files, which are not read)
"""

import os
import sys
from pathlib import Path

from npbert.errors import InputError, warn
from npbert.loading.npyfile import given_file
from npbert.stream.chunks import Chunk
from npbert.stream.parquet import parquet_file

FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}


def input_files(source: str | os.PathLike, input_format: str | None) -> list[tuple[str, str]]:
    """(path, format) of every file of the input, in order: a file, "-", or a directory. The
    format is input_format (one of CorpusSettings' INPUT_FORMATS), or the file's extension
    (any case); another extension is refused rather than read as text."""
    source = os.fspath(source)
    if source == "":  # Path("") is the current directory
        raise InputError("{source} is empty: give a file, a directory, or - for standard input")
    if source == "-":
        return [("-", standard_input(input_format))]
    files = listed_files(source)
    for path in files:  # a FIFO or a device would be waited on, or read only once
        if path.exists() and not path.is_file():
            raise InputError(
                f"{{source}} {path}: not a regular file (a pipe or a device); for standard "
                "input, give {source} -"
            )
        given_file(path, "{source}")  # a link to nothing, in a directory: before any output
    if input_format is None and not _format(files[0]):
        raise InputError(
            f"{{source}} {source}: {files[0].suffix or 'no'} extension; name it .txt, .jsonl or "
            ".parquet, or give its format ({input_format})"
        )
    named = [(str(path), input_format or _format(path)) for path in files]
    for name, kind in named:  # a Parquet file's columns are checked before any output
        if kind == "parquet":
            parquet_file(name)
    return named


def standard_input(input_format: str | None) -> str:
    """The format standard input is read in, if it can be read."""
    if input_format == "parquet":
        raise InputError("{source} -: standard input takes txt or jsonl, not Parquet")
    if sys.stdin is None:  # started with it closed (<&-)
        raise InputError("{source} -: standard input is closed")
    return input_format or "txt"


def listed_files(source: str) -> list[Path]:
    """The file `source`, or the files of texts of the directory `source`, in name order."""
    path = Path(source)
    if not path.is_dir():
        if not path.exists():
            raise InputError(f"{{source}} {source}: No such file or directory")
        return [path]
    entries = sorted(path.iterdir())
    files = [p for p in entries if _format(p) and p.name[0] != "." and not p.is_dir()]
    if not files:
        raise InputError(f"{{source}} {source}: a directory with no .txt, .jsonl or .parquet file")
    say_left_out(source, entries, files)
    return files


def say_left_out(source: str, entries: list[Path], files: list[Path]) -> None:
    """Warn, naming what a directory of texts holds besides its files of texts, as they
    are not read: subdirectories and files of other extensions. Names starting with . or _
    are not named in it (hidden, or metadata such as Hadoop's _SUCCESS). A file of texts
    whose name starts with _ is read; one whose name starts with . is not."""
    read = set(files)  # a directory may hold thousands of Parquet parts
    others = [p for p in entries if p.name[0] not in "._" and p not in read]
    if others:
        names = ", ".join(p.name + "/" * p.is_dir() for p in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        warn(f"{{source}} {source}: reads only its .txt, .jsonl and .parquet files, not {names}"
             + more)  # fmt: skip


def _format(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


def total_size(files: list[tuple[str, str]]) -> int | None:
    """Bytes of every input file (the progress bar's total); None for standard input."""
    if any(path == "-" for path, _ in files):
        return None
    return sum(os.path.getsize(path) for path, _ in files)


def size_before(files: list[tuple[str, str]], chunk: Chunk | None) -> int:
    """Bytes of the input files before `chunk` (None: all of them), as the progress bar counts
    them: the files before its own, and its own file up to it (a Parquet file's share by
    rows, as its chunks' sizes are)."""
    total = 0
    for path, input_format in files:
        if chunk is not None and path == chunk.path:
            if input_format != "parquet":
                return total + chunk.start
            rows = parquet_file(path)[0].metadata.num_rows
            return total + os.path.getsize(path) * chunk.start // max(rows, 1)
        total += os.path.getsize(path)
    return total
