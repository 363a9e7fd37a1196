"""A chunk's texts where it is embedded (a worker process, a Ray actor): its byte or row range
read again, checked against the sha256 it was cut with, and parsed into records.
"""

import hashlib
import json
from dataclasses import dataclass

from npbert.errors import InputError
from npbert.loading.config import JSON_ERRORS, json_problem
from npbert.stream.chunks import Chunk
from npbert.stream.parquet import parquet_file, parquet_rows, row_bytes, row_where


@dataclass(frozen=True)
class Record:
    """One text of the corpus, with where it came from for error messages."""

    where: str  # "corpus.jsonl line 17", "part-0.parquet row 3 (from 0)"
    text: str
    pair: str | None = None


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
    file, columns = parquet_file(chunk.path)
    groups, first = [], 0  # the row groups overlapping the range; the row the first begins
    row = 0
    for group in range(file.metadata.num_row_groups):
        rows = file.metadata.row_group(group).num_rows
        if row < chunk.stop and row + rows > chunk.start:
            first = row if not groups else first
            groups.append(group)
        row += rows
    rows = list(parquet_rows(chunk.path, file, columns, groups, first, chunk.start, chunk.stop))
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
