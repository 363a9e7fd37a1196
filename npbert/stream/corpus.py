"""Embedding a corpus larger than memory into a directory of shards, and reading it back.

The input (npbert.stream.files: .txt, .jsonl, Parquet, a directory of them, or `-` for
standard input) is cut into chunks of about `shard_bytes` bytes (npbert.stream.chunks), and
each chunk becomes one shard, its texts embedded back to back without padding
(npbert.stream.shards), in input order. An engine embeds the chunks and writes each shard's
files under hidden names: here worker processes (npbert.stream.local), or Ray actors
(npbert.ray). This process alone commits a shard, in input order (npbert.stream.index), so
an interrupted run leaves only whole shards that the index lists, and a resumed run checks
that the input still begins with what the shards hold and goes on from there.
"""

import itertools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import numpy as np

from npbert.embedder import Embedder
from npbert.errors import InputError
from npbert.layer.inputs import check_flag, check_path
from npbert.stream.chunks import Chunk, chunks
from npbert.stream.files import input_files, size_before, total_size
from npbert.stream.index import (
    INDEX,
    check_index,
    check_out,
    commit_shard,
    index_header,
    read_index,
    remove_pending,
    remove_unlisted,
    start_index,
    write_index,
    writing,
)
from npbert.stream.local import LocalEngine
from npbert.stream.progress import Progress
from npbert.stream.settings import CorpusSettings, settings_of
from npbert.stream.shards import read_shard
from npbert.stream.stops import stops_held

# An engine takes the directory and (shard name, chunk) pairs and yields, in the same order,
# (name, chunk, tokens) once the shard's files are written under their pending names.
Engine = Callable[[Path, Iterator[tuple[str, Chunk]]], Iterator[tuple[str, Chunk, int]]]

# Seconds between two writes of the index during a run. Each write is of the whole index, so
# writing it after every shard would make a run quadratic in its shards; after a run killed
# with SIGKILL, a resumed run removes the shards of its last second, which the index does not
# list, and embeds them again.
INDEX_EVERY = 1.0


def embed_corpus(
    embedder: Embedder,
    source: str | os.PathLike,
    directory: str | os.PathLike,
    settings: CorpusSettings | None = None,
    **options,
) -> dict:
    """Embed every text of `source` (a file, a directory of them, or "-") into shards under
    `directory` on worker processes of this machine; returns the index (see index.json).

    settings: a CorpusSettings (engine "local"); options: its fields by name, over it
    (shard_bytes=..., dtype="float16", resume=True, workers=..., progress="bar", ...).
    Each text's rows are (L_i, E) in the settings' dtype; npbert.ray.embed_corpus_on_ray
    runs the same job on Ray.
    """
    settings = settings_of(settings, options)
    if settings.engine != "local":
        raise InputError(
            "{engine='ray'}: embed_corpus runs the job on this machine's processes; "
            "npbert.ray.embed_corpus_on_ray runs it on Ray"
        )
    header = index_header(embedder, source, settings)
    return run_job(header, directory, LocalEngine(embedder, settings), settings)


def run_job(
    header: dict, directory: str | os.PathLike, engine: Engine, settings: CorpusSettings
) -> dict:
    """The corpus job for any engine: chunks after what the index holds, shards committed in
    input order, the index rewritten at most every INDEX_EVERY seconds, at the end and when
    stopped. header: index_header's."""
    if not check_path("directory", directory):  # Path("") is the current directory
        raise InputError("the output directory is empty: give a directory for the shards")
    directory = Path(directory)
    files = input_files(header["input"], settings.input_format)
    check_out(directory, settings.resume)  # before writing() leaves its lock in one not ours
    made = missing(directory)
    try:
        with writing(directory):
            return embed_shards(directory, header, files, engine, settings)
    finally:
        for path in made:  # where the run leaves nothing in them (see embed_shards)
            try:
                path.rmdir()
            except OSError:  # not empty
                break


def missing(directory: Path) -> list[Path]:
    """The directories that making `directory` with its parents makes, deepest first (in
    nd/../out: out and nd, not "nd/..")."""
    prefixes = [Path(*directory.parts[:n]) for n in range(1, len(directory.parts) + 1)]
    return [p for p in reversed(prefixes) if p.name not in ("", "..") and not p.exists()]


def embed_shards(
    directory: Path, header: dict, files: list, engine: Engine, settings: CorpusSettings
) -> dict:
    """run_job's work, in the directory it holds. A run that ends having committed no shard
    (its first texts refused, stopped before) removes its index: the retry its error asks for
    (other settings, a Ray engine installed) starts anew, as in an empty directory."""
    index = start_index(directory, header, settings.resume)
    try:  # from here on, a stop or an error ends in the cleanup below
        pieces, start = chunks_after(files, settings.shard_bytes, index["consumed"])
        first = len(index["shards"])
        remove_unlisted(directory, first)  # now that the input agrees with what it lists
        named = ((f"shard-{n:05d}", chunk) for n, chunk in enumerate(pieces, first))
        with closing(Progress(settings.progress, total_size(files), start)) as bar:
            commit_all(directory, index, engine(directory, named), bar)
        index["complete"] = True
    finally:
        remove_pending(directory)
        if index["shards"] or index["complete"]:
            write_index(directory, index)  # the shards committed, on an interruption too
        else:
            (directory / INDEX).unlink(missing_ok=True)
    return index


def chunks_after(files: list, shard_bytes: int, done: dict) -> tuple[Iterator[Chunk], int]:
    """The input's chunks after the `done` ones (the index's "consumed"), and the bytes of
    input before them, where the progress bar starts: the bytes the shards' texts were hashed
    as are a Parquet file's rows' JSON, so a resumed bar starts at the next chunk."""
    pieces, start = chunks(files, shard_bytes, done), done["bytes"]
    if not start or total_size(files) is None:
        return pieces, start
    following = next(pieces, None)
    start = size_before(files, following)
    return itertools.chain([] if following is None else [following], pieces), start


def commit_all(directory: Path, index: dict, embedded: Iterator, bar: Progress) -> None:
    """Commit each shard the engine has written, in input order, writing the index at most
    every INDEX_EVERY seconds."""
    written = time.monotonic()
    with closing(embedded):  # closed: no worker writing
        for name, chunk, tokens in embedded:
            due = time.monotonic() - written >= INDEX_EVERY
            with stops_held():  # a stop between its steps: an index a resumed run refuses
                commit_shard(directory, index, name, chunk, tokens, write=due)
            written = time.monotonic() if due else written
            bar.update(chunk.size, tokens)


def read_corpus(directory: str | os.PathLike, *, partial: bool = False) -> Iterator[np.ndarray]:
    """Every text's embeddings, (L_i, width) in the run's dtype, in input order, memory-mapped,
    from a run of either engine. A run that has not completed (stopped, or still going) is
    refused unless partial=True, which reads the texts its shards hold so far."""
    directory = Path(check_path("directory", directory))
    index = read_index(directory, "read_corpus")
    check_index(index, directory / INDEX, "read_corpus", "the corpus is damaged", resuming=False)
    if not check_flag("partial", partial) and index.get("complete") is not True:
        raise InputError(
            f"read_corpus: {directory} holds a run that has not completed (the first "
            f"{index.get('texts', 0):,} texts): finish it with {{resume=True}}, or pass "
            "partial=True to read what it holds"
        )
    for shard in index["shards"]:
        rows, lengths = read_shard(directory, shard, index, "read_corpus")
        for start, length in zip(np.cumsum(lengths) - lengths, lengths, strict=True):
            yield rows[start : start + length]
