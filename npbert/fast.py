"""The fast path behind npbert.embed: every family's layer, restructured for speed.

npbert.embedding is the specification; this computes the same layer in fewer passes over
memory: in blocks of tokens small enough to stay in cache, in place, on several threads.
It is checked against the specification (within 2e-6) and against float64 (at torch's
accuracy or better) in tests/test_fast.py. It is not bit-identical to the specification,
because it rounds differently in two places:
  - the token-type and position rows are added to each other once per (type, position) pair,
    in float64, and rounded once, where the specification adds them one by one in float32 in
    the family's order;
  - the sum of squares of LayerNorm's variance comes from einsum, whose summation order is
    not NumPy's pairwise sum.
Lookups use take(mode="clip") because the default mode="raise" copies `out` behind the
scenes (3x slower); the ids were checked before they got here, so clipping never moves one.
"""

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

BLOCK = 256  # tokens per block, as measured for bert-base by scripts/bench.py
PAGE = 4096  # bytes


def embed(weights, inputs, *, project: bool, threads: int | None) -> np.ndarray:
    """weights.config's layer for validated npbert.inputs.Inputs, float32, (..., L, H)."""
    config = weights.config
    input_ids = np.atleast_2d(inputs.input_ids)  # (B, L)
    batch, length = input_ids.shape
    table, rows = added_rows(weights, inputs, batch, length)  # (R, E), (B * L,) or None
    width = config.output_size  # E, or H after DeBERTa's projection
    out = empty((batch * length, width), weights.word_embeddings)  # (B * L, width)
    mask = None
    if inputs.attention_mask is not None and config.family.masks_padding:
        mask = inputs.attention_mask.reshape(-1, 1).astype(np.float32)  # (B * L, 1)
    inside = weights.projection_weight if config.projection == "inside" else None

    def work(share) -> None:  # takes blocks from `share` until there are none left
        scratch = np.empty((2, BLOCK, weights.word_embeddings.shape[1]), np.float32)
        stats = np.empty(BLOCK, np.float32)
        for start, stop in share:
            n = stop - start
            x = scratch[0, :n] if inside is not None else out[start:stop]  # (n, E)
            np.take(weights.word_embeddings, input_ids.reshape(-1)[start:stop], 0, x, "clip")
            if config.word_scale != 1.0:
                x *= np.float32(config.word_scale)
            if table is not None:
                x += np.take(table, rows[start:stop], 0, scratch[1, :n], "clip")
            if inside is not None:
                np.matmul(x, inside.T, out=out[start:stop])  # (n, H)
            layer_norm(out[start:stop], weights, stats[:n])
            if mask is not None:
                out[start:stop] *= mask[start:stop]

    run(work, blocks(batch * length), threads)
    out = out.reshape(batch, length, width)
    if project and config.projection == "after":
        out = out @ weights.projection_weight.T + weights.projection_bias  # (B, L, H)
    return out if inputs.input_ids.ndim == 2 else out[0]


def layer_norm(x: np.ndarray, weights, stats: np.ndarray) -> None:
    """LayerNorm of the rows of x (n, E), in place; stats (n,) is scratch."""
    hidden = x.shape[-1]
    mean = np.add.reduce(x, axis=-1, out=stats)  # (n,)
    mean /= hidden
    x -= mean[:, None]  # centered
    variance = np.einsum("ij,ij->i", x, x, out=stats)  # (n,) sums of squares
    variance /= hidden
    variance += weights.config.layer_norm_eps
    x /= np.sqrt(variance, out=variance)[:, None]  # normalized
    x *= weights.layer_norm_weight
    if weights.layer_norm_bias is not None:
        x += weights.layer_norm_bias


def added_rows(weights, inputs, batch: int, length: int) -> tuple:
    """(table, rows): what is added to each word row, as one lookup. The table holds the sum
    of every token-type row and every position row, T x P rows (or T, or P, where the family
    has one table; None where it has neither), and rows (B * L,) says which row each token
    adds."""
    types, positions = inputs.token_type_ids, inputs.position_ids
    if types is None and positions is None:
        return None, None
    if types is None:
        return weights.position_embeddings, np.broadcast_to(positions, (batch, length)).ravel()
    if positions is None:
        return weights.token_type_embeddings, np.asarray(types).reshape(-1)
    pairs = type_position_table(weights)  # (T * P, E)
    rows = np.asarray(types) * weights.config.max_position_embeddings + positions  # (B, L)
    return pairs, np.broadcast_to(rows, (batch, length)).ravel()


@functools.lru_cache(maxsize=4)
def type_position_table(weights) -> np.ndarray:
    """token_type_embeddings[t] + position_embeddings[p] for every (t, p), summed in float64
    and rounded once: (T * P, E) float32, 3 MiB for bert-base, made once per weights."""
    types = weights.token_type_embeddings.astype(np.float64)  # (T, E)
    positions = weights.position_embeddings.astype(np.float64)  # (P, E)
    return (
        (types[:, None, :] + positions[None, :, :]).reshape(-1, types.shape[1]).astype(np.float32)
    )


def blocks(tokens: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of BLOCK tokens of the flattened batch."""
    return [(start, min(start + BLOCK, tokens)) for start in range(0, tokens, BLOCK)]


def run(work, ranges: list, threads: int | None) -> None:
    """work(share) on `threads` threads (default: every core), all taking ranges from one
    shared iterator, so a core slowed by something else holds up no share of fixed size.
    NumPy releases the GIL inside take, the ufuncs and einsum. (next() on a list iterator is
    atomic under the GIL.)"""
    threads = min(threads or os.cpu_count() or 1, len(ranges))
    share = iter(ranges)
    if threads == 1:
        work(share)
        return
    list(thread_pool(threads).map(work, [share] * threads))


@functools.cache
def thread_pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count, kept for the process: starting threads on every call cost
    about a fifth of a bert-base batch (scripts/bench.py)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="npbert")


# A forked child inherits the pool but not its threads: a call there would wait forever for
# workers that do not exist. The child starts with no pool and makes its own.
os.register_at_fork(after_in_child=thread_pool.cache_clear)


def empty(shape: tuple[int, ...], like: np.ndarray) -> np.ndarray:
    """np.empty(shape, float32) at the same offset within a 4 KiB page as `like`'s data.

    For the output of the word lookup. A copy runs up to twice as slow when the array it
    writes starts a few bytes past the one it reads, modulo 4 KiB: the CPU holds back loads
    that look like reads of the stores just made (4K aliasing). Measured on bert-base: np.take
    of 256 rows took 173 us instead of 92 with the output 8 to 24 bytes past the word table
    (modulo 1 KiB, as rows are 3 KiB), and a batch on one thread 14% longer. At the table's
    own offset, every row is written a whole number of rows from where it is read.
    """
    nbytes = math.prod(shape) * 4
    buffer = np.empty(nbytes + PAGE, np.uint8)
    start = (like.ctypes.data - buffer.ctypes.data) % PAGE
    return buffer[start : start + nbytes].view(np.float32).reshape(shape)
