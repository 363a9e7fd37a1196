"""Embedding a corpus larger than memory: `npbert embed --input FILE --out DIR`.

The input (.txt, one text per line; .jsonl, a `text` field and an optional `pair`; or `-`
for standard input) is read lazily in windows of about `shard_tokens` tokens. Each window is
sorted by length into batches (little padding), embedded, and written as one shard with its
texts in input order and no padding at all:

    DIR/index.json                    model, input, settings, shards, complete: true|false
    DIR/shard-00000.npy               (tokens, H) float32, the window's texts back to back
    DIR/shard-00000.lengths.npy       (texts,) int64, tokens per text, in input order
    DIR/shard-00000.input_ids.npy     (tokens,) int64
    DIR/shard-00000.token_type_ids.npy

Shards are written under temporary names and renamed, and index.json is rewritten the same
way after each one, so an interrupted run leaves only complete shards that the index lists.
`--resume` continues such a run from the first text not in a shard.
"""

import itertools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.atomic import write_atomically
from npbert.errors import InputError
from npbert.model import Embedder

INDEX = "index.json"
SHARD_FILES = ("", ".lengths", ".input_ids", ".token_type_ids")


@dataclass(frozen=True)
class Record:
    """One text of the corpus, with where it came from for error messages."""

    where: str  # "corpus.jsonl line 17"
    text: str
    pair: str | None = None


def read_records(path: str, input_format: str) -> Iterator[Record]:
    """Texts from a .txt (one per line) or .jsonl file, or `-` for standard input."""
    name = "stdin" if path == "-" else Path(path).name
    try:
        stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as error:
        raise InputError(f"--input {path}: {error.strerror}") from None
    with stream:
        try:
            for number, line in enumerate(stream, start=1):
                line = line.rstrip("\n").rstrip("\r")
                where = f"{name} line {number}"
                yield _jsonl(where, line) if input_format == "jsonl" else Record(where, line)
        except UnicodeDecodeError as error:
            raise InputError(f"{name}: not UTF-8 text ({error.reason})") from None


def _jsonl(where: str, line: str) -> Record:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{where}: not valid JSON ({error.msg})") from None
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        raise InputError(f"{where}: expected an object with a string 'text' field")
    pair = item.get("pair")
    if pair is not None and not isinstance(pair, str):
        raise InputError(f"{where}: 'pair' must be a string")
    return Record(where, item["text"], pair)


def windows(records: Iterator[Record], embedder: Embedder, shard_tokens: int, truncation: bool):
    """Lists of (record, tokenizers Encoding) of about shard_tokens tokens each, in input order.

    Where a window ends depends only on the texts' token counts, so a resumed run cuts the
    rest of the corpus exactly as the first run would have.
    """
    window, tokens = [], 0
    while group := list(itertools.islice(records, 256)):  # tokenized 256 texts at a time
        for item in zip(group, _tokenize(group, embedder, truncation), strict=True):
            window.append(item)
            tokens += len(item[1].ids)
            if tokens >= shard_tokens:
                yield window
                window, tokens = [], 0
    if window:
        yield window


def _tokenize(group: list[Record], embedder: Embedder, truncation: bool) -> list:
    """One tokenizers call for the group; texts with and without pairs go separately."""
    encodings = {}
    for paired in (False, True):
        members = [i for i, r in enumerate(group) if (r.pair is not None) == paired]
        if not members:
            continue
        encoded = embedder.tokenizer.encode_batch(
            [group[i].text for i in members],
            [group[i].pair for i in members] if paired else None,
            max_length=embedder.weights.config.max_length,
            truncation=truncation,
            names=[group[i].where for i in members],
        )
        encodings.update(zip(members, encoded, strict=True))
    return [encodings[i] for i in range(len(group))]


def embed_window(window: list, embedder: Embedder, batch_size: int) -> dict[str, np.ndarray]:
    """The shard's arrays: every text's token rows back to back, in input order."""
    lengths = np.array([len(encoding.ids) for _, encoding in window], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    shard = np.empty((int(lengths.sum()), embedder.weights.config.output_size), np.float32)
    input_ids = np.concatenate([encoding.ids for _, encoding in window]).astype(np.int64)
    token_type_ids = np.concatenate([e.type_ids for _, e in window]).astype(np.int64)
    by_length = np.argsort(lengths, kind="stable")  # batches of similar lengths: little padding
    for first in range(0, len(window), batch_size):
        members = by_length[first : first + batch_size]
        batch = embedder.tokenizer.pad([window[i][1] for i in members])
        output = embedder.embed(batch)  # (batch, width, H)
        for row, i in enumerate(members):
            shard[starts[i] : starts[i] + lengths[i]] = output[row, : lengths[i]]
    return {
        "": shard,
        ".lengths": lengths,
        ".input_ids": input_ids,
        ".token_type_ids": token_type_ids,
    }


def write_index(directory: Path, index: dict) -> None:
    text = (json.dumps(index, indent=1) + "\n").encode()
    write_atomically(directory / INDEX, lambda f: f.write(text))


def start_index(directory: Path, settings: dict, resume: bool) -> dict:
    """A new index, or with --resume the existing one after checking it is the same job."""
    index_path = directory / INDEX
    if directory.exists() and any(directory.iterdir()) and not resume:
        raise InputError(
            f"--out {directory} exists and is not empty: pass --resume to continue the run "
            "that wrote it, or give a new directory"
        )
    if not resume or not index_path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        return {**settings, "shards": [], "texts": 0, "tokens": 0, "complete": False}
    index = json.loads(index_path.read_text())
    changed = [key for key in settings if index.get(key) != settings[key]]
    if changed:
        raise InputError(
            f"--resume: {directory} was written with other settings ({', '.join(changed)}); "
            "give a new directory"
        )
    for stray in directory.glob(".*.tmp"):  # left by an interrupted run
        stray.unlink()
    return index


def embed_corpus(
    embedder: Embedder,
    source: str | os.PathLike,
    directory: str | os.PathLike,
    *,
    input_format: str,
    batch_size: int = 32,
    shard_tokens: int = 16384,
    truncation: bool = False,
    resume: bool = False,
    progress: bool = True,
) -> dict:
    """Embed every text of `source` into shards under `directory`; returns the index."""
    source, directory = os.fspath(source), Path(directory)
    settings = {
        "format": "npbert corpus embeddings, version 1",
        "model": embedder.weights.source,
        "hidden_size": embedder.weights.config.output_size,
        "input": source,
        "input_format": input_format,
        "shard_tokens": shard_tokens,
        "truncation": truncation,
    }
    index = start_index(directory, settings, resume)
    if index["complete"]:
        return index
    records = read_records(source, input_format)
    for _ in range(index["texts"]):  # --resume: skip what the shards already hold
        next(records, None)
    from huggingface_hub.utils import tqdm  # the progress bar huggingface_hub already uses

    with tqdm(unit="tok", unit_scale=True, disable=not progress, desc="embedding") as bar:
        for window in windows(records, embedder, shard_tokens, truncation):
            arrays = embed_window(window, embedder, batch_size)
            name = f"shard-{len(index['shards']):05d}"
            for suffix in SHARD_FILES:
                write_atomically(
                    directory / f"{name}{suffix}.npy", lambda f, a=arrays[suffix]: np.save(f, a)
                )
            index["shards"].append(
                {
                    "name": name,
                    "first": index["texts"],
                    "texts": len(window),
                    "tokens": len(arrays[""]),
                }
            )
            index["texts"] += len(window)
            index["tokens"] += len(arrays[""])
            write_index(directory, index)
            bar.update(len(arrays[""]))
    index["complete"] = True
    write_index(directory, index)
    return index


def read_corpus(directory: str | os.PathLike) -> Iterator[np.ndarray]:
    """Every text's embeddings, (L_i, H) float32, in input order, from a finished run."""
    directory = Path(directory)
    index = json.loads((directory / INDEX).read_text())
    for shard in index["shards"]:
        rows = np.load(directory / f"{shard['name']}.npy", mmap_mode="r")
        lengths = np.load(directory / f"{shard['name']}.lengths.npy")
        for start, length in zip(np.cumsum(lengths) - lengths, lengths, strict=True):
            yield rows[start : start + length]
