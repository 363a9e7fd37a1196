"""The fast path's driver: blocks of tokens, rows looked up once per call, threads.

npbert.embedding.embed_block does the arithmetic for one block, step for step as the readable
embedding_stages, so the result is bit-identical. This module decides what goes into each
block. What does not change from block to block is looked up or tiled once per call instead
of gathered per token: the position rows when every sequence has the same position_ids (the
default), a token type's row for a run of one token type, gamma and beta. Adding a tiled row
is the same arithmetic as adding a gathered one, only faster. Lookups here take
mode="clip" for the reason given in embed_block: the ids are checked before they get here.
"""

import bisect
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
    puts the output is otherwise luck. At the table's own offset, every row is written a
    whole number of rows from where it is read: with BERT's sizes (H a multiple of 128, rows
    a multiple of 512 bytes) never a few bytes past it.
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


def plan_blocks(batch: int, length: int) -> list[tuple[int, int]]:
    """Blocks as (start, stop) ranges of the batch's B * L tokens in order: as many whole
    sequences as fit in BLOCK tokens, or BLOCK-token pieces of a sequence longer than that."""
    if length > BLOCK:
        return [
            (r * length + c, r * length + min(c + BLOCK, length))
            for r in range(batch)
            for c in range(0, length, BLOCK)
        ]
    step = min(BLOCK // length, batch) * length
    return [(s, min(s + step, batch * length)) for s in range(0, batch * length, step)]


def token_type_runs(types: np.ndarray, blocks: list) -> list:
    """Each block's runs of one token type, as [(start, stop, type)] within the block (one
    run for single sentences, two per pair), or None past RUNS runs: then its rows are
    gathered. types (B * L,) int. Where the type changes is found once for the batch."""
    changes = (np.flatnonzero(types[1:] != types[:-1]) + 1).tolist()  # sorted
    runs = []
    for start, stop in blocks:
        inside = changes[bisect.bisect_right(changes, start) : bisect.bisect_left(changes, stop)]
        starts, stops = [start, *inside], [*inside, stop]
        pieces = [(a - start, b - start, int(types[a])) for a, b in zip(starts, stops, strict=True)]
        runs.append(pieces if len(pieces) <= RUNS else None)
    return runs


def run_blocks(weights, out, input_ids, token_type_ids, position_ids, *, threads) -> None:
    """The layer for (B, L) ids into out (B, L, H), block by block, on `threads` threads
    (default: every core). NumPy releases the GIL inside take and the ufuncs, so Python
    threads run in parallel."""
    batch, length, hidden = out.shape
    blocks = plan_blocks(batch, length)
    size = max(stop - start for start, stop in blocks)  # tokens in the largest block
    out = out.reshape(-1, hidden)  # (B * L, H), a view: blocks are ranges of its rows
    input_ids, token_type_ids = input_ids.reshape(-1), token_type_ids.reshape(-1)  # (B * L,)
    runs = token_type_runs(token_type_ids, blocks)
    present = {t for block in runs if block for _, _, t in block}
    type_rows = {t: tile(weights.token_type_embeddings[t], size) for t in present}
    gamma = tile(weights.layer_norm_weight, size)  # (size, H)
    beta = tile(weights.layer_norm_bias, size)  # (size, H)
    position_rows = None
    if position_ids.ndim == 1:  # shared by every sequence: (sequences in a block * L, H)
        # One take, not a gather then a tiling copy: that copy ran 13x slower (290 us) when
        # malloc put it 16 bytes past its source modulo 64.
        ids = np.tile(position_ids, max(1, size // length))
        position_rows = np.empty((len(ids), hidden), np.float32)
        np.take(weights.position_embeddings, ids, 0, out=position_rows, mode="clip")
    else:
        position_ids = position_ids.reshape(-1)

    def work(share) -> None:  # takes blocks from `share` until there are none left
        scratch = np.empty((2, size, hidden), np.float32)
        row_stats = np.empty((size, 1), np.float32)
        for (start, stop), block_runs in share:
            n = stop - start
            if block_runs is None:
                types = token_type_ids[start:stop]
                rows = np.take(
                    weights.token_type_embeddings, types, 0, out=scratch[0, :n], mode="clip"
                )
                token_types = [(0, n, rows)]
            else:
                token_types = [(a, b, type_rows[t][: b - a]) for a, b, t in block_runs]
            if position_rows is not None:
                offset = start % length  # 0 but in the pieces of a sequence past BLOCK
                positions = position_rows[offset : offset + n]
            else:
                ids = position_ids[start:stop]
                positions = np.take(
                    weights.position_embeddings, ids, 0, out=scratch[1, :n], mode="clip"
                )
            embed_block(
                out[start:stop],
                input_ids[start:stop],
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
    share = iter(list(zip(blocks, runs, strict=True)))
    if threads == 1:
        work(share)
        return
    list(thread_pool(threads).map(work, [share] * threads))


@functools.cache
def thread_pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count, kept for the process: starting threads on every call cost
    about a fifth of a bert-base batch (scripts/bench.py)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="npbert")
