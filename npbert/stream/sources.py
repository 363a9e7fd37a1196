"""The corpus job's input: texts from .txt, .jsonl and Parquet files, a directory of them, or
standard input, cut into chunks (one chunk makes one shard), with what identifies the input.

    .txt      one text a line (\\n or \\r\\n; a lone \\r is refused); an empty line is an empty text
    .jsonl    one JSON object a line: a string "text" and an optional string "pair"
    .parquet  a string column "text" and an optional "pair" (needs pyarrow)
    DIR       its .txt, .jsonl and .parquet files in name order, one after another (a warning names
              its subdirectories and other files, which are not read)

A chunk is about `shard_bytes` of input that ends at a line end (the first at or after
shard_bytes), or the Parquet rows whose texts make that much, and never spans two files:
where chunks end depends on the input alone, so a resumed run cuts the rest of the input
as a fresh one would. The main process only reads, hashes and cuts; the records are parsed
where the chunk is embedded (a worker process, a Ray actor), which reads the chunk's byte or
row range again and checks it against the chunk's sha256.

What identifies the input consumed so far (stored in the index with the shards it lists): the count
of texts and of bytes, and the sha256 of those bytes: each line with its line end, or for
Parquet each row as the JSON [text, pair] and a newline. --resume reads that much of the
input again and refuses to continue if it differs; what follows it is embedded, so a file
that grew is continued and an edited one refused.
"""

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from npbert.errors import InputError, warn
from npbert.layer.inputs import shown
from npbert.loading.config import JSON_ERRORS, json_problem
from npbert.loading.npyfile import given_file

FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
BLOCK = 1 << 20  # bytes read at a time while checking a prefix
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, as Windows editors write: not text


@dataclass(frozen=True)
class Record:
    """One text of the corpus, with where it came from for error messages."""

    where: str  # "corpus.jsonl line 17", "part-0.parquet row 3 (from 0)"
    text: str
    pair: str | None = None


@dataclass(frozen=True)
class Chunk:
    """The input of one shard: a byte range of a text file (lines), or a row range of a
    Parquet file; `data` holds the bytes themselves where they cannot be read again (stdin,
    /proc and /sys files)."""

    path: str  # "-" for standard input
    format: str  # txt, jsonl or parquet
    first: int  # the line (1-based) or row (0-based) number of its first text
    start: int  # byte or row offset in the file
    stop: int
    texts: int
    sha256: str  # of the chunk's own bytes (lines) or rows, to check the range read again
    consumed: dict  # texts, bytes, sha256 of the input from its start through this chunk
    size: int  # bytes of the input file it stands for, for the progress bar
    data: bytes | None = None

    @property
    def name(self) -> str:
        return "stdin" if self.path == "-" else Path(self.path).name


def input_files(source: str | os.PathLike, input_format: str | None) -> list[tuple[str, str]]:
    """(path, format) of every file of the input, in order: a file, "-", or a directory. The
    format is input_format, or the file's extension (any case); another extension is refused
    rather than read as text."""
    if input_format is not None and input_format not in FORMATS.values():
        raise InputError(f"input format {shown(input_format)}: use txt, jsonl or parquet")
    source = os.fspath(source)
    if source == "":  # Path("") is the current directory
        raise InputError("{source} is empty: give a file, a directory, or - for standard input")
    if source == "-":
        if input_format == "parquet":
            raise InputError("{source} -: standard input takes txt or jsonl, not Parquet")
        if sys.stdin is None:  # started with it closed (<&-)
            raise InputError("{source} -: standard input is closed")
        return [("-", input_format or "txt")]
    path = Path(source)
    if path.is_dir():
        entries = sorted(path.iterdir())
        files = [p for p in entries if _format(p) and p.name[0] != "." and not p.is_dir()]
        if not files:
            raise InputError(
                f"{{source}} {source}: a directory with no .txt, .jsonl or .parquet file"
            )
        say_left_out(source, entries, files)
    elif path.exists():
        files = [path]
    else:
        raise InputError(f"{{source}} {source}: No such file or directory")
    for p in files:  # a FIFO or a device would be waited on, or read only once
        if p.exists() and not p.is_file():
            raise InputError(
                f"{{source}} {p}: not a regular file (a pipe or a device); for standard input, "
                "give {source} -"
            )
        given_file(p, "{source}")  # a link to nothing, in a directory: before any output
    if input_format is None and not _format(files[0]):
        raise InputError(
            f"{{source}} {source}: {files[0].suffix or 'no'} extension; name it .txt, .jsonl or "
            ".parquet, or give its format ({input_format})"
        )
    files = [(str(p), input_format or _format(p)) for p in files]
    for name, kind in files:  # a Parquet file's columns are checked before any output
        if kind == "parquet":
            _parquet_file(name)
    return files


def say_left_out(source, entries: list[Path], files: list[Path]) -> None:
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
            rows = _parquet_file(path)[0].metadata.num_rows
            return total + os.path.getsize(path) * chunk.start // max(rows, 1)
        total += os.path.getsize(path)
    return total


class Consumed:
    """A running count and sha256 of the input consumed: what identifies it in the index.
    Each file's name and format are hashed before its first byte: the same bytes cut into
    other files, or read as another format, are other texts."""

    def __init__(self):
        self.texts, self.bytes, self.hash = 0, 0, hashlib.sha256()
        self.file = b""  # the next file's name and format, hashed with its first bytes

    def start_file(self, path: str, input_format: str) -> None:
        name = path if path == "-" else Path(path).name  # a directory's files are its own
        self.file = json.dumps([name, input_format]).encode() + b"\0"

    def add(self, data: bytes, texts: int) -> None:
        if self.file:
            self.hash.update(self.file)
            self.file = b""
        self.texts += texts
        self.bytes += len(data)
        self.hash.update(data)

    def state(self) -> dict:
        return {"texts": self.texts, "bytes": self.bytes, "sha256": self.hash.hexdigest()}


class Prefix:
    """With --resume, what the shards already hold: that many bytes of input are read and
    hashed, not cut into chunks, and must hash as they did."""

    def __init__(self, done: dict | None):
        self.done = done
        self.left = done["bytes"] if done else 0

    def check(self, consumed: Consumed) -> None:
        """At the end of the prefix (or of the input): the same bytes as before, else refuse."""
        same = ("bytes", "sha256")
        if self.done is not None and any(consumed.state()[k] != self.done[k] for k in same):
            raise InputError(
                f"{{resume=True}}: the input has changed since its first "
                f"{self.done['texts']:,} texts ({self.done['bytes']:,} bytes) were embedded: they "
                "differ now (their bytes, or the name or format of a file, hashed with them), so "
                "the shards no longer match it; start again in a new directory"
            )
        self.done = None


def chunks(files: list[tuple[str, str]], shard_bytes: int, done: dict | None = None):
    """The input's chunks in order, after the `done` ones (an index's "consumed" state),
    which must still be what they were."""
    consumed, prefix = Consumed(), Prefix(done)
    if prefix.left == 0:
        prefix.check(consumed)
    for path, input_format in files:
        consumed.start_file(path, input_format)
        if input_format == "parquet":
            yield from _parquet_chunks(path, shard_bytes, consumed, prefix)
        else:
            yield from _line_chunks(path, input_format, shard_bytes, consumed, prefix)
    prefix.check(consumed)  # the input ended inside the prefix


def _line_chunks(path: str, input_format: str, shard_bytes: int, consumed, prefix):
    """Chunks of a text file: `shard_bytes` read, then on to the end of the line. A chunk that
    ends where the file ends, inside a line, is the last: a file still being written is read
    as it was then (read on, the rest of that line would be a text of its own)."""
    with _open(path) as stream:
        # Sent with the chunk where its bytes cannot be read again: stdin, and the pseudo-files
        # of /proc and /sys, which give other bytes at each read (and say they hold 0 bytes,
        # or 4,096 in /sys).
        kept = path == "-" or _pseudo(path, stream)
        line, offset = _skip_lines(path, stream, consumed, prefix)
        while data := _read_up_to(stream, shard_bytes):
            if not data.endswith(b"\n"):
                data += stream.readline()
            if offset == 0 and data == BOM:  # an empty file saved by such an editor
                consumed.add(data, 0)
                return
            texts = data.count(b"\n") + (not data.endswith(b"\n"))
            consumed.add(data, texts)
            yield Chunk(
                path, input_format, line, offset, offset + len(data), texts,
                hashlib.sha256(data).hexdigest(), consumed.state(), len(data),
                data if kept else None,
            )  # fmt: skip
            if not data.endswith(b"\n"):
                return  # the file ended inside a line, its last (see above)
            line, offset = line + texts, offset + len(data)


def _pseudo(path: str, stream) -> bool:
    """Whether a file is made up as it is read: one of /proc or /sys, or of no stated size."""
    real = os.path.realpath(path)
    return real.startswith(("/proc/", "/sys/")) or os.fstat(stream.fileno()).st_size == 0


def _read_up_to(stream, size: int) -> bytes:
    """stream.read(size) in blocks: read() allocates `size` bytes first, whatever the file."""
    blocks = []
    while size > 0 and (block := stream.read(min(size, BLOCK))):
        blocks.append(block)
        size -= len(block)
    return b"".join(blocks)


def _open(path: str):
    if path == "-":
        return open(sys.stdin.fileno(), "rb", closefd=False)
    try:
        return open(path, "rb")
    except OSError as error:
        raise InputError(f"{{source}} {path}: {error.strerror}") from None


def _skip_lines(path: str, stream, consumed: Consumed, prefix: Prefix) -> tuple[int, int]:
    """Read and hash the prefix's bytes in this file; (next line number, byte offset)."""
    lines = offset = 0
    last = head = b"\n"
    while prefix.left and (data := stream.read(min(BLOCK, prefix.left))):
        lines += data.count(b"\n")
        head = head if offset else data
        offset, last = offset + len(data), data[-1:]
        consumed.add(data, data.count(b"\n"))
        prefix.left -= len(data)
    if offset and prefix.left == 0:
        prefix.check(consumed)
    if head == BOM:  # a file that held only a BOM, no text, as _line_chunks has it
        return 1, offset
    if offset and last != b"\n":  # the prefix ended inside a line: the line's text counted
        consumed.texts += 1
        following = stream.read(1)
        if following == b"\r":
            following += stream.read(1)
        if following in (b"\n", b"\r\n"):  # that line's end, written since (as by a writer
            consumed.add(following, 0)  # that puts it before each line): it ended there
            offset += len(following)
        elif following:
            name = "stdin" if path == "-" else Path(path).name
            raise InputError(
                f"{{resume=True}}: {name} line {lines + 1} has changed since it was embedded (it "
                "went on past where it ended then); start again in a new directory"
            )
        lines += 1
    return lines + 1, offset


def _pyarrow_parquet():
    try:
        import pyarrow.parquet
    except ImportError:
        raise InputError(
            "reading Parquet needs pyarrow: pip install pyarrow (npbert[ray] brings it)"
        ) from None
    return pyarrow.parquet


def _parquet_file(path: str):
    """The file and its columns to read: text, and pair if it has one."""
    pq = _pyarrow_parquet()
    try:
        file = pq.ParquetFile(path)
    except (OSError, ValueError) as error:  # pyarrow.ArrowInvalid is a ValueError
        reason = " ".join(str(error).split())  # pyarrow's may end in a newline: one line
        raise InputError(
            f"{{source}} {Path(path).name}: not a readable Parquet file ({reason})"
        ) from None
    schema = file.schema_arrow
    if "text" not in schema.names:
        raise InputError(
            f"{Path(path).name} has no 'text' column (its columns: {', '.join(schema.names)})"
        )
    columns = [name for name in ("text", "pair") if name in schema.names]
    for name in columns:
        if schema.names.count(name) > 1:
            raise InputError(
                f"{Path(path).name} has {schema.names.count(name)} columns named '{name}': "
                "which one to read is not clear"
            )
        kind = schema.field(name).type
        # pandas' categoricals: a dictionary of strings (a list of strings, whose value_type
        # is string too, holds no text)
        strings = kind.value_type if str(kind).startswith("dictionary<") else kind
        if str(strings) not in ("string", "large_string", "string_view"):
            raise InputError(f"{Path(path).name}: column '{name}' holds {kind}, not strings")
    return file, columns


def _parquet_rows(
    path: str, file, columns: list[str], groups=(), first: int = 0, start: int = 0, stop=None
) -> Iterator[tuple]:
    """(text, pair) of each row in [start, stop) (of `groups`, whose first row is `first`),
    pair None without a pair column. Only those rows become Python strings: a chunk of a
    large row group converted all of the group's, and a file of one group was quadratic."""
    batches = file.iter_batches(columns=columns, batch_size=4096, row_groups=groups or None)
    row = first
    while (batch := _next_batch(batches, path, row)) is not None:
        end = row + batch.num_rows
        if stop is not None and row >= stop:
            break
        low, high = max(start - row, 0), min(end if stop is None else stop, end) - row
        if low < high:
            yield from _batch_rows(path, batch.slice(low, high - low), columns, row + low)
        row = end


def _next_batch(batches, path: str, row: int):
    """The next batch of rows, or None at the end; a damaged file's bytes (which pyarrow finds
    only as it decodes them) an InputError naming the file and the first row of the batch."""
    try:
        return next(batches, None)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(error).split())
        raise InputError(
            f"{{source}} {Path(path).name}: a damaged Parquet file ({reason}), found reading on "
            f"from row {row} (counting from 0)"
        ) from None


def _batch_rows(path: str, batch, columns: list[str], row: int) -> Iterator[tuple]:
    """(text, pair) of each row of a batch whose first row is `row`."""
    try:
        texts = batch.column(0).to_pylist()
        pairs = batch.column(1).to_pylist() if len(columns) > 1 else [None] * len(texts)
    except UnicodeDecodeError as error:  # a string column's bytes that are not UTF-8
        where = row_where(Path(path).name, row + _first_not_utf8(batch))
        raise InputError(f"{where}: not UTF-8 text ({error.reason})") from None
    return zip(texts, pairs, strict=True)


def row_where(name: str, row: int) -> str:
    """Where a Parquet row is, for messages: rows count from 0, as pyarrow and pandas count
    them, where a text file's lines count from 1, as editors count them."""
    return f"{name} row {row} (from 0)"


def _first_not_utf8(batch) -> int:
    """The batch's first row with a value that does not decode (looked for only on the way
    to an error, one value at a time)."""
    for i in range(batch.num_rows):
        for column in batch.columns:
            try:
                column[i].as_py()
            except UnicodeDecodeError:
                return i
    return 0


def row_bytes(text, pair) -> bytes:
    """What a Parquet row adds to the input's hash: the JSON [text, pair] and a newline."""
    return json.dumps([text, pair], ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


def _parquet_chunks(path: str, shard_bytes: int, consumed: Consumed, prefix: Prefix):
    """Chunks of a Parquet file: rows whose JSON makes about shard_bytes."""
    file, columns = _parquet_file(path)
    rows_total, size = file.metadata.num_rows, os.path.getsize(path)
    start, pending, pending_bytes = 0, [], 0
    for row, (text, pair) in enumerate(_parquet_rows(path, file, columns)):
        data = row_bytes(text, pair)
        if prefix.left > 0:
            consumed.add(data, 1)
            prefix.left -= len(data)
            start = row + 1
            if prefix.left <= 0:
                prefix.check(consumed)
            continue
        pending.append(data)
        pending_bytes += len(data)
        if pending_bytes >= shard_bytes or row + 1 == rows_total:
            data = b"".join(pending)
            consumed.add(data, len(pending))
            share = size * len(pending) // max(rows_total, 1)
            yield Chunk(
                path, "parquet", start, start, row + 1, len(pending),
                hashlib.sha256(data).hexdigest(), consumed.state(), share,
            )  # fmt: skip
            start, pending, pending_bytes = row + 1, [], 0


# --- where a chunk is embedded: its records -----------------------------------------------


def changed_underneath(chunk: Chunk) -> InputError:
    """The input changed while it was read: a resume would refuse it, so only a new run can."""
    return InputError(
        f"{chunk.name} changed while it was being embedded: embed it again into a new "
        "directory (a resume refuses input that changed)"
    )


def read_chunk(chunk: Chunk) -> list[Record]:
    """The chunk's records, read again from the file and checked against what was hashed."""
    if chunk.format == "parquet":
        return _parquet_records(chunk)
    data = chunk.data if chunk.data is not None else _read_range(chunk)
    if hashlib.sha256(data).hexdigest() != chunk.sha256:
        raise changed_underneath(chunk)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [
        _record(chunk, chunk.first + i, line.removesuffix(b"\r")) for i, line in enumerate(lines)
    ]


def _read_range(chunk: Chunk) -> bytes:
    try:
        with open(chunk.path, "rb") as f:
            f.seek(chunk.start)
            return f.read(chunk.stop - chunk.start)
    except OSError as error:
        raise InputError(f"{{source}} {chunk.path}: {error.strerror}") from None


def _record(chunk: Chunk, number: int, line: bytes) -> Record:
    where = f"{chunk.name} line {number}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        encoding = number == 1 and other_unicode(line)  # Windows PowerShell 5's `>`: UTF-16
        if encoding:
            raise InputError(
                f"{where}: not UTF-8 text but {encoding} (it begins with {encoding}'s byte order "
                f"mark): convert it, e.g. iconv -f {encoding} -t UTF-8"
            ) from None
        raise InputError(
            f"{where}: not UTF-8 text ({error.reason} at byte {error.start} of the line)"
        ) from None
    if number == 1:  # a byte order mark (BOM): not text (utf-8-sig)
        text = text.removeprefix("\ufeff")
    if chunk.format == "jsonl":
        return _jsonl(where, text)
    if "\r" in text:  # a file of classic Mac line endings would be one text
        raise InputError(
            f"{where}: a carriage return (\\r) inside the line; lines end with \\n or \\r\\n "
            "(convert the file, e.g. tr '\\r' '\\n')"
        )
    return Record(where, text)


def other_unicode(line: bytes) -> str | None:
    """The encoding a file's first line names by its byte order mark, where not UTF-8's."""
    if line[:4] in (b"\xff\xfe\0\0", b"\0\0\xfe\xff"):  # before UTF-16 LE's, its prefix
        return "UTF-32"
    if line[:2] in (b"\xff\xfe", b"\xfe\xff"):  # little- and big-endian
        return "UTF-16"
    return None


class _Members(list):
    """A JSON object as its (name, value) pairs in order: json keeps only the last value of a
    name given twice, and {"text": "a", "text": "b"} would embed "b" without a word."""


# Made once: json.loads(line, object_pairs_hook=...) builds a decoder each call, 2x as slow.
_DECODER = json.JSONDecoder(object_pairs_hook=_Members)


def _jsonl(where: str, line: str) -> Record:
    try:
        members = _DECODER.decode(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{where}: not valid JSON ({error.msg})") from None
    except JSON_ERRORS as error:  # what Python will not read: a huge integer, deep nesting
        raise InputError(f"{where}: not valid JSON ({json_problem(error)})") from None
    item = dict(members) if isinstance(members, _Members) else None
    for field in ("text", "pair"):
        if item is not None and sum(name == field for name, _ in members) > 1:
            raise InputError(f"{where}: '{field}' is given more than once")
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        raise InputError(f"{where}: expected an object with a string 'text' field")
    pair = item.get("pair")
    if pair is not None and not isinstance(pair, str):
        raise InputError(f"{where}: 'pair' must be a string")
    for field in ("text", "pair"):
        _check_unicode(where, field, item.get(field))
    return Record(where, item["text"], pair)


def _check_unicode(where: str, field: str, value: str | None) -> None:
    """JSON can escape half a surrogate pair (\\ud800), which is no character at all."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(
            f"{where}: '{field}' is not valid Unicode ({error.reason} at character {error.start})"
        ) from None


def _parquet_records(chunk: Chunk) -> list[Record]:
    """Rows [start, stop) of a Parquet file, read through the row groups that hold them."""
    file, columns = _parquet_file(chunk.path)
    groups, first = [], 0  # the row groups overlapping the range; the row the first begins
    row = 0
    for group in range(file.metadata.num_row_groups):
        rows = file.metadata.row_group(group).num_rows
        if row < chunk.stop and row + rows > chunk.start:
            first = row if not groups else first
            groups.append(group)
        row += rows
    rows = list(_parquet_rows(chunk.path, file, columns, groups, first, chunk.start, chunk.stop))
    data = b"".join(row_bytes(text, pair) for text, pair in rows)
    if hashlib.sha256(data).hexdigest() != chunk.sha256:
        raise changed_underneath(chunk)
    records = []
    for number, (text, pair) in enumerate(rows, start=chunk.first):
        where = row_where(chunk.name, number)
        if text is None:
            raise InputError(f"{where}: 'text' is null")
        records.append(Record(where, text, pair))
    return records
