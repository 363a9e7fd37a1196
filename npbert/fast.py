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
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from npbert.embedding import embed_block

BLOCK = 256  # tokens per block, as measured for bert-base by scripts/bench.py
RUNS = 16  # token-type runs in a block up to which rows are added run by run, not gathered
PAGE = 4096  # bytes


def empty(shape: tuple[int, ...], like: np.ndarray) -> np.ndarray:
    """np.empty(shape, float32) at the same offset within a 4 KiB page as `like`'s data.

    For the output of the word lookup. A copy runs up to twice as slow when the array it
    writes starts a few bytes past the one it reads, modulo 4 KiB: the CPU holds back loads
    that look like reads of the stores just made (4K aliasing). Measured on bert-base: np.take
    of 256 rows took 173 us instead of 92 with the output 8 to 24 bytes past the word table
    (modulo 1 KiB, as rows are 3 KiB), and a batch on one thread 14% longer. Where malloc
    puts the output is otherwise luck; at the table's own offset it is never unlucky.
    """
    nbytes = math.prod(shape) * 4
    buffer = np.empty(nbytes + PAGE, np.uint8)
    start = (like.ctypes.data - buffer.ctypes.data) % PAGE
    return buffer[start : start + nbytes].view(np.float32).reshape(shape)


def tile(row: np.ndarray, count: int) -> np.ndarray:
    """(H,) -> (count, H), with one broadcast copy (np.tile is 20x slower on 2-D)."""
    tiled = np.empty((count, len(row)), np.float32)
    tiled[...] = row
    return tiled


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


def token_type_runs(types: np.ndarray, tiled: dict, table: np.ndarray, scratch) -> list:
    """table[types] as [(start, stop, rows)]: slices of the tiled rows, one per run of one
    token type (one run for a single sentence, two per pair), or gathered when the runs are
    many. types (n,) int; tiled: type -> (>= n, H) tile of its row; scratch (n, H)."""
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
    gamma = tile(weights.layer_norm_weight, size)  # (size, H)
    beta = tile(weights.layer_norm_bias, size)  # (size, H)
    first_type = token_type_ids.flat[0]
    one_type = bool((token_type_ids == first_type).all())  # single sentences: no check per block
    present = [first_type] if one_type else range(weights.type_vocab_size)
    type_rows = {t: tile(weights.token_type_embeddings[t], size) for t in present}
    position_rows = None
    if position_ids.ndim == 1:  # shared by every sequence: (rows * L, H)
        # One take, not a gather then a tiling copy: that copy ran 13x slower (290 us) when
        # malloc put it 16 bytes past its source modulo 64.
        position_rows = np.empty((rows * length, hidden), np.float32)
        ids = np.tile(position_ids, rows)  # (rows * L,)
        np.take(weights.position_embeddings, ids, 0, out=position_rows, mode="clip")

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
                token_types = token_type_runs(
                    types, type_rows, weights.token_type_embeddings, scratch[0, :n]
                )
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
