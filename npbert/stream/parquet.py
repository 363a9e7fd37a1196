"""Parquet input: a file's string columns "text" and "pair", read in batches of rows (pyarrow).

A row counts in the input's hash (and a chunk's size) as the JSON [text, pair] and a newline
(row_bytes); rows count from 0 in messages, as pyarrow and pandas count them (row_where).
"""

import json
from collections.abc import Iterator
from pathlib import Path

from npbert.errors import InputError


def pyarrow_parquet():
    try:
        import pyarrow.parquet
    except ImportError:
        raise InputError(
            "reading Parquet needs pyarrow: pip install pyarrow (npbert[ray] brings it)"
        ) from None
    return pyarrow.parquet


def parquet_file(path: str):
    """The file and its columns to read: text, and pair if it has one."""
    pq = pyarrow_parquet()
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


def parquet_rows(
    path: str, file, columns: list[str], groups=(), first: int = 0, start: int = 0, stop=None
) -> Iterator[tuple]:
    """(text, pair) of each row in [start, stop) (of `groups`, whose first row is `first`),
    pair None without a pair column. Only those rows become Python strings: a chunk of a
    large row group would convert all of the group's, and a file of one group be quadratic."""
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
