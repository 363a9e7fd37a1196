"""The fast path's driver: blocks of tokens, rows looked up once per call, threads.

npbert.embedding.embed_block does the arithmetic for one block, step for step as the readable
embedding_stages, so the result is bit-identical. This module decides what goes into each
block. What does not change from block to block is looked up or tiled once per call instead
of gathered per token: the position rows when every sequence has the same position_ids (the
default), a token type's row for a run of one token type, gamma and beta. Adding a tiled row
is the same arithmetic as adding a gathered one, only faster. Lookups here take
mode="clip" for the reason given in embed_block: the ids are checked before they get here.
"""

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from npbert.embedding import embed_block

BLOCK = 256  # tokens per block, as measured for bert-base by scripts/bench.py
RUNS = 16  # token-type runs in a block up to which rows are added run by run, not gathered


def tile(rows: np.ndarray, count: int) -> np.ndarray:
    """(..., H) -> (count * ..., H), with one broadcast copy (np.tile is 20x slower on 2-D)."""
    tiled = np.empty((count, *rows.shape), np.float32)
    tiled[...] = rows
    return tiled.reshape(-1, rows.shape[-1])


def plan_blocks(batch: int, length: int) -> tuple[list[tuple[slice, slice]], int, int]:
    """Blocks of whole rows, or of one row's columns past BLOCK tokens, as (rows, columns)
    slices of a (batch, length) input; and the rows and columns of the largest block."""
    rows, width = min(max(1, BLOCK // length), batch), min(length, BLOCK)
    blocks = [
        (slice(r, r + rows), slice(c, c + width))
        for r in range(0, batch, rows)
        for c in range(0, length, width)
    ]
    return blocks, rows, width


def token_type_runs(types: np.ndarray, tiled: list, table: np.ndarray, scratch) -> list:
    """table[types] as [(start, stop, rows)]: slices of the tiled rows, one per run of one
    token type (one run for a single sentence, two per pair), or gathered when the runs are
    many. types (n,) int; tiled: one (>= n, H) tile per type; scratch (n, H)."""
    starts = [0, *(np.flatnonzero(types[1:] != types[:-1]) + 1)]
    if len(starts) > RUNS:
        return [(0, len(types), np.take(table, types, 0, out=scratch, mode="clip"))]
    stops = [*starts[1:], len(types)]
    return [(a, b, tiled[types[a]][: b - a]) for a, b in zip(starts, stops, strict=True)]


def run_blocks(weights, out, input_ids, token_type_ids, position_ids, *, threads) -> None:
    """The layer for (B, L) ids into out (B, L, H), block by block, on `threads` threads
    (default: every core). NumPy releases the GIL inside take and the ufuncs, so Python
    threads run in parallel."""
    batch, length, hidden = out.shape
    blocks, rows, width = plan_blocks(batch, length)
    size = rows * width  # tokens in the largest block
    gamma, beta = tile(weights.layer_norm_weight, size), tile(weights.layer_norm_bias, size)
    type_rows = [tile(row, size) for row in weights.token_type_embeddings]  # T x (size, H)
    position_rows = None
    if position_ids.ndim == 1:  # shared by every sequence: (rows * L, H)
        position_rows = tile(weights.position_embeddings[position_ids], rows)
    first_type = token_type_ids.flat[0]
    one_type = bool((token_type_ids == first_type).all())  # single sentences: no check per block

    def work(share) -> None:  # takes blocks from `share` until there are none left
        scratch = np.empty((2, size, hidden), np.float32)
        row_stats = np.empty((size, 1), np.float32)
        for block_rows, block_columns in share:
            block = out[block_rows, block_columns].reshape(-1, hidden)  # a view: (n, H)
            n = len(block)
            if one_type:
                token_types = [(0, n, type_rows[first_type][:n])]
            else:
                types = token_type_ids[block_rows, block_columns].reshape(-1)  # (n,)
                table = weights.token_type_embeddings
                token_types = token_type_runs(types, type_rows, table, scratch[0, :n])
            if position_rows is not None:
                positions = position_rows[block_columns.start : block_columns.start + n]
            else:
                ids = position_ids[block_rows, block_columns].reshape(-1)
                positions = np.take(
                    weights.position_embeddings, ids, 0, out=scratch[1, :n], mode="clip"
                )
            embed_block(
                block,
                input_ids[block_rows, block_columns].reshape(-1),
                weights.word_embeddings,
                token_types,
                positions,
                gamma[:n],
                beta[:n],
                weights.layer_norm_eps,
                scratch[1, :n],
                row_stats[:n],
            )

    threads = min(threads or os.cpu_count() or 1, len(blocks))
    # One iterator shared by the threads: each takes the next block when it is free, so a
    # core slowed by something else holds up no share of fixed size. (next() on a list
    # iterator is atomic under the GIL.)
    share = iter(blocks)
    if threads == 1:
        work(share)
        return
    list(thread_pool(threads).map(work, [share] * threads))


@functools.cache
def thread_pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count, kept for the process: starting threads on every call cost
    about a fifth of a bert-base batch (scripts/bench.py)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="npbert")
