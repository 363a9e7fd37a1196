"""The corpus job's input cut into chunks, one chunk a shard, with what identifies the input.

A chunk is about `shard_bytes` of input that ends at a line end (the first at or after
shard_bytes), or the Parquet rows whose texts make that much, and never spans two files:
where chunks end depends on the input alone, so a resumed run cuts the rest of the input
as a fresh one would. The main process only reads, hashes and cuts; the records are parsed
where the chunk is embedded (a worker process, a Ray actor), which reads the chunk's byte or
row range again and checks it against the chunk's sha256 (npbert.stream.records).

What identifies the input consumed so far (stored in the index with the shards it lists): the count
of texts and of bytes, and the sha256 of those bytes: each line with its line end, or for
Parquet each row as the JSON [text, pair] and a newline. A resumed run reads that much of the
input again and refuses to continue if it differs; what follows it is embedded, so a file
that grew is continued and an edited one refused.
"""

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from npbert.errors import DamagedCorpus, InputError
from npbert.stream.parquet import parquet_file, parquet_rows, row_bytes

BLOCK = 1 << 20  # bytes read at a time while checking a prefix
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, as Windows editors write: not text


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
    """On a resumed run, what the shards already hold: that many bytes of input are read and
    hashed, not cut into chunks, and must hash as they did."""

    def __init__(self, done: dict | None):
        self.done = done
        self.left = done["bytes"] if done else 0
        self.texts = done["texts"] if done else None  # to check once the prefix is read

    def check_texts(self, texts: int) -> None:
        """Once, where the prefix's bytes have been read (and hashed as they were): as many
        texts in them as the index says its shards hold. An index whose counts were made to
        agree without a shard would resume with its texts missing."""
        if self.texts is not None and texts != self.texts:
            problem = (
                f"says its shards hold {self.texts:,} texts, and the input's bytes they were "
                f"embedded from hold {texts:,}: its counts disagree"
            )
            raise DamagedCorpus(f"{{resume=True}}: its index {problem}; give a new directory",
                                path=None, problem=problem)  # fmt: skip
        self.texts = None

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
            pieces = _parquet_chunks(path, shard_bytes, consumed, prefix)
        else:
            pieces = _line_chunks(path, input_format, shard_bytes, consumed, prefix)
        for chunk in pieces:
            prefix.check_texts(chunk.consumed["texts"] - chunk.texts)  # the texts before it
            yield chunk
    prefix.check(consumed)  # the input ended inside the prefix
    prefix.check_texts(consumed.texts)


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


def _parquet_chunks(path: str, shard_bytes: int, consumed: Consumed, prefix: Prefix):
    """Chunks of a Parquet file: rows whose JSON makes about shard_bytes."""
    file, columns = parquet_file(path)
    rows_total, size = file.metadata.num_rows, os.path.getsize(path)
    start, pending, pending_bytes = 0, [], 0
    for row, (text, pair) in enumerate(parquet_rows(path, file, columns)):
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
