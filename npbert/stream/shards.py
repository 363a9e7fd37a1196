"""A shard: its arrays, made from a chunk's records on one thread, its files, and their checks.

    DIR/shard-00000.npy               (tokens, E) float32 (or float16), the texts' rows
    DIR/shard-00000.lengths.npy       (texts,) int64, tokens per text, in input order
    DIR/shard-00000.input_ids.npy     (tokens,) int64
    DIR/shard-00000.token_type_ids.npy

An engine writes them under hidden pending names (.shard-00000.npy, ...); the job renames
them into place (npbert.stream.index.commit_shard).
"""

import os
from pathlib import Path

import numpy as np

from npbert.atomic import write_atomically
from npbert.embedder import Embedder, check_encodings
from npbert.errors import InputError, WorkerLost
from npbert.layer.ragged import embed_encodings
from npbert.loading.npyfile import check_header, load_npy, regular_file
from npbert.stream.chunks import Chunk
from npbert.stream.records import Record

SHARD_FILES = {  # array -> file name suffix
    "embeddings": "",
    "lengths": ".lengths",
    "input_ids": ".input_ids",
    "token_type_ids": ".token_type_ids",
}


def shard_arrays(
    embedder: Embedder, records: list[Record], truncation: bool, dtype: str
) -> dict[str, np.ndarray]:
    """A chunk's records -> the shard's arrays (npbert.layer.ragged), on one thread:
    embeddings (tokens, E) in `dtype`, lengths (texts,), input_ids and token_type_ids
    (tokens,) int64."""
    encodings = tokenize(embedder, records, truncation)
    arrays = embed_encodings(embedder.weights, encodings, threads=1)
    with np.errstate(over="ignore"):  # past float16's range: Inf, as the caller was told
        arrays["embeddings"] = arrays["embeddings"].astype(dtype, copy=False)
    return arrays


def tokenize(embedder: Embedder, records: list[Record], truncation: bool) -> list:
    """tokenizers Encodings of the records, in order; texts with and without pairs go in
    separate calls, each text named by where it is in errors."""
    encodings = {}
    for paired in (False, True):
        members = [i for i, r in enumerate(records) if (r.pair is not None) == paired]
        if members:
            encoded = embedder.tokenizer.encode_batch(
                [records[i].text for i in members],
                [records[i].pair for i in members] if paired else None,
                max_length=embedder.weights.config.max_length,
                truncation=truncation,
                names=[records[i].where for i in members],
                with_tokens=False,
            )
            encodings.update(zip(members, encoded, strict=True))
    ordered = [encodings[i] for i in range(len(records))]
    check_encodings(embedder, ordered, lambda row, token: records[row].where)
    return ordered


def out_of_memory(name: str, chunk: Chunk) -> WorkerLost:
    """What stops the run when a worker (or a Ray actor) had no memory for a shard."""
    return WorkerLost(
        f"a worker ran out of memory embedding {name} ({chunk.texts:,} texts, "
        f"{chunk.size:,} bytes of input) and the run stopped: any shards committed before it are "
        "kept; run again with {resume=True}, with a smaller {shard_bytes} or more memory"
    )


def pending_path(directory: Path, name: str, suffix: str) -> Path:
    return directory / f".{name}{suffix}.npy"


def write_pending(directory: Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    """A shard's files, each written atomically under its hidden pending name."""
    for key, suffix in SHARD_FILES.items():
        write_atomically(
            pending_path(directory, name, suffix),
            lambda f, a=arrays[key]: np.save(f, a),
            sweep=False,  # the run clears killed writers' temporaries (index.writing)
        )


def read_shard(directory: Path, shard: dict, index: dict, what: str) -> tuple:
    """A shard's rows (tokens, E), memory-mapped, and its lengths (texts,), checked to agree
    with each other and the index (its tokens, width and dtype): sliced unchecked, a negative
    or wrong length would give another text's rows without a word, and a shard of another
    run, rows of another model. Else InputError naming `what` reads it."""
    path = regular_file(directory / f"{shard['name']}.npy", f"{what}:")
    with open(path, "rb") as f:  # a missing file stays FileNotFoundError, with its path
        check_header(f, os.fstat(f.fileno()).st_size, f"{what}: {path}")  # truncated, foreign
    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:  # object arrays: never unpickled
        raise InputError(f"{what}: {path} is not a readable shard ({error})") from None
    lengths = load_npy(directory / f"{shard['name']}.lengths.npy", f"{what}:")
    check_shard(f"{what}: {directory / shard['name']}", rows, lengths, shard, index)
    return rows, lengths


def check_shard(where: str, rows: np.ndarray, lengths: np.ndarray, shard: dict, index: dict):
    """InputError naming `where` unless the rows and lengths are the shard's the index lists."""
    if rows.ndim != 2 or lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise InputError(
            f"{where}: rows {rows.shape} {rows.dtype} and lengths {lengths.shape} "
            f"{lengths.dtype} are not a shard's (tokens, E) rows and (texts,) integer lengths"
        )
    listed = (shard.get("tokens"), index.get("hidden_size"), index.get("dtype"))
    if (*rows.shape, rows.dtype.name) != listed:
        raise InputError(
            f"{where}: its rows are {rows.shape} {rows.dtype}, where the index lists "
            f"{listed[0]} tokens of width {listed[1]} in {listed[2]}: the shard is not this "
            "run's, or damaged"
        )
    outside = ((lengths < 0) | (lengths > len(rows))).any()  # and so no sum that wraps around
    if outside or lengths.sum() != len(rows) or shard.get("texts") != len(lengths):
        raise InputError(
            f"{where}: its lengths {_summary(lengths)} do not match its {len(rows)} rows "
            f"and the {shard.get('texts')} texts the index lists: the corpus is damaged"
        )


def _summary(lengths: np.ndarray) -> str:
    least = f", least {lengths.min()}" if len(lengths) else ""
    return f"({len(lengths)} texts, sum {lengths.sum()}{least})"
