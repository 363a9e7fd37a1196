"""The fast path behind npbert.embed: every family's layer, restructured for speed.

npbert.layer.embedding is the specification; this computes the same layer in fewer passes over
memory, in blocks of tokens that stay in cache, in place, on several threads. It uses one
fact about LayerNorm: centering is linear. For x = w + r, a word row w plus the rest r (the
token-type row plus the position row), x - mean(x) = (w - mean(w)) + (r - mean(r)). With both
kinds of rows centered ahead of time, a token is centered by one addition, and

    xc  = Wc[input_ids] + Rc[token_type_ids, position_ids]      # centered rows, (n, E)
    out = xc / sqrt(sum(xc ** 2) / E + eps) * gamma + beta

Rc (`added` below; Wc is `words`) holds every (token type, position) pair's row, summed and
centered in float64 and rounded once: T x P rows, 3 MiB for bert-base, made once per weights; a
sequence of token type 0 at the default positions 0..L-1 adds its first L rows as they lie. Wc
is as big as the word table, so a word row is centered when it is looked up, with the same
float32 operations that make Wc for the whole table where that pays (after as many tokens as the
table has rows, or for a corpus): either way the result is the same, bit for bit, and a text
embeds identically alone or in any batch, on any number of threads.

This rounds differently from the specification, which adds the rows one by one in the
family's order and takes the mean of the sum: the tests hold the two within 2e-6 of each
other (up to three float32 steps of the largest output, where outputs exceed about 8), and
this path about as close as torch to the float64 reference, closer on the bench's inputs
(tests/test_families.py and test_verify.py say how close, scripts/bench.py measures it).
Centering each table apart loses more where the tables cancel: a dimension of +10 in every
word row and -10 in every position row (rows spread 1.7) put this path 2.2e-5 from float64,
the specification 7.3e-6, which centers their sum. A LayerNorm over a few values (a toy's
width, no real checkpoint's) loses digits on every path: a token whose values nearly agree has
a variance near eps. On random tables (N(0, 0.5), 65,536 tokens) at width 2, this path was
4.6e-4 from float64, torch 7.6e-4, the specification 9.1e-4, and the two 4.9e-4 apart (2.1e-5
at width 3, 3.0e-6 at 4, 1.1e-6 at 5). gamma stays a pass of its own: folded into
both tables (gamma * Wc, gamma * Rc), it saved one pass in six (6% on blocks of 128 rows, 9% on
512, AMD EPYC) but rounded each product before the sum, which put the bench's random weights
at 0.648 median float32 ULPs from float64 (torch 0.627, this path 0.587) and
all-MiniLM-L6-v2's outputs 1.19e-6 from it (torch 1.0e-6).
Products (DeBERTa's projection E -> H before its LayerNorm, and the one after the layer of
ALBERT, ELECTRA and RoFormer) are npbert.layer.product's: every value the exact one rounded once, so
a row's bits depend on neither its batch nor BLAS's kernel and threads. Lookups use
take(mode="clip") because the default mode="raise" copies `out` behind the scenes (3x slower);
the ids were checked before they got here, so clipping never moves one.
"""

import math
import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from npbert.errors import InputError
from npbert.layer.cores import cpus
from npbert.layer.inputs import check_count, shown
from npbert.layer.product import rounded_product, wide_weight
from npbert.layer.weights import EmbeddingWeights, check_weights

# Tokens per block, as measured on bert-base (scripts/bench.py, AMD EPYC, 1 MiB L2 a core):
# longer NumPy calls mean fewer hand-offs of the GIL between threads and less Python a token.
# Against blocks of 256, on two threads, 32 x 128 ran 1.0-1.14x and 64 x 512 1.13-1.33x
# faster in blocks of 512 (three runs); on one thread the two ran alike, 1.09-1.12x faster
# than blocks of 64.
BLOCK = 512
# Gamma and beta multiply and add to a block's rows in groups of SHORT, seen as (n / SHORT,
# SHORT * E), with SHORT copies of each seen as one row, (1, SHORT * E): as fast a pass as a
# same-shape operand, where NumPy runs a broadcast (E,) row about half as fast, in 96 KiB of
# cache for both at bert-base's 768.
SHORT = 16
# Past the cores no thread runs faster (they take turns holding the GIL between NumPy calls),
# and the process's pool keeps each thread it starts: as the corpus job's workers, at most
# this many a core.
THREADS_PER_CORE = 4
PAGE = 4096  # bytes


def check_threads(threads) -> int:
    """threads as a count, at most THREADS_PER_CORE for each core this process may use."""
    threads = check_count("threads", threads)
    cores = cpus()
    if threads > THREADS_PER_CORE * cores:
        raise InputError(
            f"threads={threads}: more than {THREADS_PER_CORE} threads for each of the {cores} "
            "cores this process may use; more run no faster, and each stays in the pool"
        )
    return threads


def embed(weights, inputs, *, project: bool, threads: int | None) -> np.ndarray:
    """weights.config's layer for validated npbert.layer.inputs.Inputs, float32, (..., L, E)."""
    config = weights.config
    input_ids = inputs.input_ids.reshape(-1, inputs.input_ids.shape[-1])  # (B, L)
    batch, length = input_ids.shape
    threads = threads or cpus()
    record = derived(weights)
    plan = Plan.make(weights, record, inputs, batch, length, BLOCK)
    out = empty((batch * length, config.output_size), plan.words)  # (B * L, E)
    run(plan.work(out, input_ids.reshape(-1)), plan.blocks, threads)
    note_tokens(weights, record, batch * length)
    if project and config.projection == "after":
        out = apply_projection(weights, out)  # (B * L, H)
    out = out.reshape(batch, length, -1)  # (B, L, E or H)
    return out if inputs.input_ids.ndim == 2 else out[0]


@dataclass(slots=True)  # not frozen: frozen, it took 0.9 us more to make, per call
class Plan:
    """What one call does to each block of tokens."""

    weights: object
    words: np.ndarray  # (V, E): Wc, or W whose rows are centered as they are looked up
    centered: bool  # words is Wc
    added: np.ndarray | None  # (R, E) rows added to each token (Rc, or uncentered), or None
    rows: np.ndarray | None  # (B * L,) the row of `added` each token adds, where no tile
    tile: np.ndarray | None  # (tokens in a block, E): added[rows] when every block adds it
    mask: np.ndarray | None  # (B * L, 1) float32, for DeBERTa
    affine: tuple  # LayerNorm's gamma and beta (or None), each also as SHORT rows: affine_rows
    blocks: list  # (start, stop) ranges of the flattened tokens
    length: int  # L

    @classmethod
    def make(cls, weights, record: "Derived", inputs, batch: int, length: int, block: int):
        inside = weights.config.projection == "inside"  # DeBERTa: center after projecting
        added, rows, leading = added_rows(weights, record, inputs, centered=not inside)
        blocks = plan_blocks(batch, length, block)
        tile = None if rows is None else added_tile(added, rows, leading, batch, block)
        rows = None if tile is not None or rows is None else rows.reshape(-1)
        words = None if inside else record.words
        mask = None
        if inputs.attention_mask is not None and weights.config.family.masks_padding:
            mask = inputs.attention_mask.reshape(-1, 1).astype(np.float32)
        return cls(
            weights,
            weights.word_embeddings if words is None else words,
            words is not None,
            added,
            rows,
            tile,
            mask,
            record.affine,
            blocks,
            length,
        )

    def work(self, out: np.ndarray, input_ids: np.ndarray):
        """The function each thread runs: takes (start, stop) blocks from a shared iterator
        and writes the layer's output for them into out (B * L, width)."""
        weights = self.weights
        inside = weights.config.projection == "inside"
        width = self.words.shape[1]
        eps = np.float32(weights.config.layer_norm_eps)

        size = self.blocks[0][1] - self.blocks[0][0]  # tokens in the largest block: the first
        gathers = self.added is not None and self.tile is None  # added rows gathered per block
        # Looked up once a call, not once a block: a block's Python costs about a pass over it.
        words, centered, mask, affine = self.words, self.centered, self.mask, self.affine
        add, scale = self.add, weights.config.word_scale
        projection = wide_projection(weights) if inside else None  # (H, E + 1) float64

        buffer = row_buffer(size, out.shape[1])  # the rows normalize_centered divides

        def work(share) -> None:
            # Scratch only where a block needs it: a call that allocates a few MB it does not
            # use pays for mmap and munmap (glibc's default above 128 KiB), 20 us a call.
            gathered = np.empty((size if gathers else 0, width), np.float32)  # added rows
            unprojected = np.empty((size if inside else 0, width), np.float32)  # DeBERTa's
            stats = np.empty(size, np.float32)
            scratch = gathered, unprojected, stats
            if buffer is None:
                return blocks(share, *scratch)
            with np.errstate():  # restores this thread's buffer size when it leaves
                np.setbufsize(buffer)
                return blocks(share, *scratch)

        def blocks(share, gathered, unprojected, stats) -> None:
            for start, stop in share:
                n = stop - start
                x = unprojected[:n] if inside else out[start:stop]  # (n, E)
                np.take(words, input_ids[start:stop], 0, x, "clip")
                if not (centered or inside):
                    center(x, scale, stats[:n])
                add(x, start, stop, gathered)
                if inside:  # DeBERTa: E -> H, then centered as a word row is
                    rounded_product(x, projection, out[start:stop])  # (n, H)
                    center(out[start:stop], 1.0, stats[:n])
                normalize_centered(out[start:stop], eps, affine, stats[:n])
                if mask is not None:
                    out[start:stop] *= mask[start:stop]

        return work

    def add(self, x: np.ndarray, start: int, stop: int, gathered: np.ndarray) -> None:
        """x += the block's token-type and position rows (gathered into `gathered` where the
        plan has no tile)."""
        if self.added is None:
            return
        n = stop - start
        if self.tile is not None:
            offset = start % self.length  # 0 but in the pieces of a sequence past a block
            x += self.tile[offset : offset + n]
        else:
            rows = np.take(self.added, self.rows[start:stop], 0, gathered[:n], "clip")
            x += rows


def row_buffer(rows: int, width: int) -> int | None:
    """The ufunc buffer size (elements) for blocks of up to `rows` rows of `width`, or None to
    keep NumPy's.

    Dividing each row by its own std, x (n, E) / std (n, 1), is the one broadcast of a column
    per block, and NumPy's buffer size changes how fast it runs. On 256 rows (AMD EPYC, NumPy
    2.4), a buffer of one row against the default 8192 elements: 31 against 40 us at E = 768,
    39 against 52 at 1024, the same at 384, 13 against 9.5 at 128, hence the floor on width
    (a buffer of two rows ran as slow as the default). Setting the size and restoring it
    costs about 2 us, more than it saves on fewer than about 60 rows of 768; on 96 rows it
    saved 1.2 us of 15, within a call's noise, hence the floor of 128 rows. Results are the
    same bit for bit: the buffer decides how NumPy walks the arrays, not what it computes
    (reductions over a row are not buffered).
    """
    if width < 256 or rows < 128:
        return None
    return -(-width // 16) * 16  # NumPy takes multiples of 16


def added_tile(added: np.ndarray, rows: np.ndarray, leading: bool, batch: int, block: int):
    """The rows every block adds, when the batch's sequences all add the same ones (single
    sentences, or pairs split alike), repeated for a block of whole sequences: (L,) rows are
    every sequence's, (B, L) rows are checked; `leading` rows are 0..L-1, the table's first L
    rows as they lie. None for one sequence or sequences that differ: then each block gathers
    its own (a tile of one sequence would be as big as the output for texts back to back)."""
    length = rows.shape[-1]
    repeats = max(1, min(batch, block // length))  # sequences in a block
    if leading and repeats == 1:
        return added[:length]  # (L, E): a view, no lookup
    if batch == 1:
        return None
    first = rows if rows.ndim == 1 else rows[0]  # (L,)
    if rows.ndim == 2 and not (rows == first).all():
        return None
    return np.take(added, np.tile(first, repeats), 0)  # (repeats * L, E)


def apply_projection(weights, x: np.ndarray) -> np.ndarray:
    """The projection E -> H that ALBERT, ELECTRA and RoFormer apply after the layer: x
    (..., E) float32 -> (..., H) float32, each row rounded as it would be in any batch."""
    rows = x.reshape(-1, x.shape[-1])  # (n, E)
    projected = np.empty((len(rows), weights.projection_weight.shape[0]), np.float32)
    rounded_product(rows, wide_projection(weights), projected)  # (n, H)
    return projected.reshape(*x.shape[:-1], -1)  # (..., H)


def center(x: np.ndarray, scale: float, stats: np.ndarray) -> None:
    """Rows of x (n, E) minus their mean, in place, after BigBird's scale; the same float32
    operations as precompute makes Wc with, so a row comes out the same either way."""
    if scale != 1.0:
        x *= np.float32(scale)
    mean = np.add.reduce(x, axis=-1, out=stats)  # (n,)
    mean /= np.float32(x.shape[-1])
    x -= mean[:, None]


def normalize_centered(x: np.ndarray, eps, affine: tuple, stats: np.ndarray) -> None:
    """LayerNorm of rows x (n, width) already centered (by Wc and Rc, or center), in place, gamma
    and beta included: x / sqrt(mean(x^2) + eps) * gamma + beta, gamma and beta as
    affine_rows gives them."""
    n = len(x)
    scale = np.vecdot(x, x, out=stats)  # (n,) sums of squares
    scale /= np.float32(x.shape[-1])  # variance
    scale += eps
    x /= np.sqrt(scale, out=scale)[:, None]  # normalized: dividing rounds once, where
    # multiplying by 1 / std rounds twice (median float32 ULPs from float64: 0.59 dividing,
    # 0.64 multiplying)
    gamma, beta, gamma_rows, beta_rows = affine
    whole = n - n % SHORT  # rows in groups of SHORT
    if whole:  # the same products and sums, elementwise, on a view
        groups = x[:whole].reshape(whole // SHORT, -1)  # (n / SHORT, SHORT * E)
        groups *= gamma_rows
        if beta is not None:
            groups += beta_rows
    if whole < n:
        rest = x[whole:]  # (n % SHORT, E)
        rest *= gamma
        if beta is not None:
            rest += beta


# --- tables made once per weights ---------------------------------------------------------


@dataclass(slots=True, eq=False)
class Derived:
    """What this module makes from one set of weights, kept as long as the weights are."""

    affine: tuple  # LayerNorm's gamma and beta (or None), each also as SHORT rows: affine_rows
    added: dict = field(default_factory=dict)  # {centered: (R, E) table}, see added_table
    projection: np.ndarray | None = None  # (H, E + 1) float64: wide_projection
    words: np.ndarray | None = None  # Wc, once made
    tokens: int = 0  # tokens embedded so far
    mode: str = "auto"  # centered_table's mode


_derived = weakref.WeakKeyDictionary()  # weights -> Derived: one lookup a call
_lock = threading.Lock()


def derived(weights) -> Derived:
    """The weights' Derived record, made on first use."""
    found = _derived.get(weights)
    if found is None:
        with _lock:
            found = _derived.get(weights) or Derived(affine_rows(weights))
            _derived[weights] = found
    return found


def affine_rows(weights) -> tuple:
    """LayerNorm's gamma and beta (None without), (E,) each; then SHORT copies of each seen as
    one row, (1, SHORT * E)."""
    rows = (weights.layer_norm_weight, weights.layer_norm_bias)
    copies = (None if row is None else np.tile(row, SHORT).reshape(1, -1) for row in rows)
    return *rows, *copies


def added_rows(weights, record: Derived, inputs, *, centered: bool) -> tuple:
    """(table, rows, leading): what each token adds to its word row, as one lookup, or
    (None, None, False). The table holds the sum of every token-type row and every position
    row (T x P rows; T or P rows where the family has one table); rows says which each token
    adds: (B, L), or (L,) for every sequence (or the one sequence); leading: rows are 0..L-1."""
    types, positions = inputs.token_type_ids, inputs.position_ids
    if types is None and positions is None:
        return None, None, False
    table = added_table(weights, record.added, centered)
    if positions is None:
        return table, types, False
    if types is None or (inputs.positions_from_zero and not types.any()):
        # token type 0 (or none): the row is the position's
        return table, positions, inputs.positions_from_zero
    return table, types * weights.config.max_position_embeddings + positions, False  # (B, L)


def added_table(weights, tables: dict, centered: bool) -> np.ndarray:
    """Every (token type, position) pair's T[t] + P[p] in float64, centered per row if asked,
    rounded once to float32: (T * P, E), or (T, E) or (P, E) where the family has one table.
    Made once, kept in `tables` (the weights' Derived.added) under `centered`."""
    if centered in tables:  # made before: read without the lock
        return tables[centered]
    with _lock:
        if centered not in tables:
            parts = [weights.token_type_embeddings, weights.position_embeddings]
            parts = [p.astype(np.float64) for p in parts if p is not None]
            rows = parts[0] if len(parts) == 1 else parts[0][:, None, :] + parts[1][None, :, :]
            rows = rows.reshape(-1, rows.shape[-1])  # (R, E)
            if centered:
                rows = rows - rows.mean(axis=-1, keepdims=True)
            tables[centered] = rows.astype(np.float32)
        return tables[centered]


def wide_projection(weights) -> np.ndarray:
    """The projection's weight and bias (H, E + 1) in float64 for rounded_product, made once."""
    record = derived(weights)
    if record.projection is None:
        with _lock:
            if record.projection is None:
                record.projection = wide_weight(weights.projection_weight, weights.projection_bias)
    return record.projection


# Wc is made without being asked only up to this size: it is one more copy of the word table
# (94 MB for bert-base, 768 MB for XLM-RoBERTa-base). Larger ones: centered_table(w, "always").
AUTO_LIMIT = 512 * 2**20  # bytes


def centered_table(weights: EmbeddingWeights, mode: str) -> None:
    """When to make Wc for these weights: "auto" (the default: once as many tokens have been
    embedded as the table has rows, and the table is at most AUTO_LIMIT bytes), "always" (now)
    or "never" (and drop it). Results are the same either way; only speed and memory differ."""
    if not isinstance(mode, str) or mode not in ("auto", "always", "never"):
        raise InputError(f"mode must be 'auto', 'always' or 'never', not {shown(mode)}")
    check_weights(weights)
    record = derived(weights)
    with _lock:
        record.mode = mode
        if mode == "never":
            record.words = None
    if mode == "always":
        precompute(weights)


def note_tokens(weights, record: Derived, tokens: int) -> None:
    """Count the tokens embedded; once they reach the word table's rows, make Wc: by then
    centering rows one lookup at a time has cost about what centering the table costs."""
    if record.words is not None:
        return
    with _lock:
        record.tokens += tokens
        due = record.tokens >= weights.config.vocab_size and record.words is None
    if due and may_precompute(weights):
        precompute(weights)


def may_precompute(weights) -> bool:
    """Whether centered_table's mode lets Wc be made without being asked: "auto" for a table
    of at most AUTO_LIMIT bytes (for a corpus, say, which will embed many tokens)."""
    mode = derived(weights).mode
    return mode == "auto" and weights.word_embeddings.nbytes <= AUTO_LIMIT


def precompute(weights) -> None:
    """Make Wc for these weights now: the word table with every row centered (and scaled by
    BigBird's sqrt(H)), as center() would center it when looked up. Same size as the table."""
    record = derived(weights)
    if weights.config.projection == "inside" or record.words is not None:
        return
    table = weights.word_embeddings
    words = np.empty(table.shape, np.float32)
    stats = np.empty(BLOCK, np.float32)
    for start in range(0, len(table), BLOCK):
        rows = words[start : start + BLOCK]
        rows[...] = table[start : start + BLOCK]
        center(rows, weights.config.word_scale, stats[: len(rows)])
    with _lock:
        if record.mode != "never" and record.words is None:
            record.words = words


# --- blocks and threads -------------------------------------------------------------------


def plan_blocks(batch: int, length: int, block: int) -> list[tuple[int, int]]:
    """Blocks as (start, stop) ranges of the batch's B * L tokens in order: as many whole
    sequences as fit in `block` tokens, or pieces of that many of a longer sequence."""
    if batch * length <= block:
        return [(0, batch * length)]
    if length > block:
        return [
            (r * length + c, r * length + min(c + block, length))
            for r in range(batch)
            for c in range(0, length, block)
        ]
    step = min(block // length, batch) * length
    return [(s, min(s + step, batch * length)) for s in range(0, batch * length, step)]


def run(work, ranges: list, threads: int) -> None:
    """work(share) on up to `threads` threads, all taking ranges from one
    shared iterator, so a core slowed by something else holds up no share of fixed size.
    NumPy releases the GIL inside take, the ufuncs and vecdot. (next() on a list iterator is
    atomic under the GIL.)"""
    threads = min(threads, len(ranges))
    share = iter(ranges)
    helpers = submit(work, share, threads - 1)
    try:
        stopping(work, share)  # this thread works too: one hand-off fewer than waiting
    finally:
        # Every thread done, error or not: none still writes when this returns. A helper
        # still queued (behind another call's work) would find no range left: cancelled.
        for helper in helpers:
            helper.cancel()
        if helpers:  # wait([]) costs about 1 us, 3% of one short sentence
            wait(helpers)
    for helper in helpers:
        if not helper.cancelled():
            helper.result()


def stopping(work, share) -> None:
    """work(share); on an error, the ranges no thread has taken yet are dropped, so that the
    other threads stop after their block."""
    try:
        work(share)
    except BaseException:
        deque(share, 0)
        raise


def submit(work, share, helpers: int) -> list[Future]:
    """stopping(work, share) on up to `helpers` threads of the pool: as many as it takes. At
    interpreter exit (an atexit handler calling embed) it takes none, and where a thread
    cannot start, fewer: the calling thread does the rest. (A task queued for a thread that
    did not start finds the ranges all taken when it runs.)"""
    if helpers < 1:
        return []
    pool, futures = thread_pool(helpers), []
    for _ in range(helpers):
        try:
            futures.append(pool.submit(stopping, work, share))
        except RuntimeError:  # "... after interpreter shutdown", "can't start new thread"
            break
    return futures


_pool: dict[int, ThreadPoolExecutor] = {}  # {its threads: the pool}: at most one


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool, with at least `workers` threads: kept for the process, as starting
    threads on every call cost about a fifth of a bert-base batch (scripts/bench.py), and one
    for all, grown if a call asks for more, so that idle threads do not pile up. A pool starts
    its threads as tasks need them, not all at once."""
    with _lock:
        size = next(iter(_pool), 0)
        if size < workers:
            if _pool:  # dropped, not shut down: a call that holds it may still submit to
                _pool.pop(size)  # it; its threads end once it is garbage
            _pool[workers] = ThreadPoolExecutor(workers, thread_name_prefix="npbert")
        return next(iter(_pool.values()))


def _after_fork() -> None:
    """A forked child inherits the pools but not their threads, and maybe a held lock: a call
    there would wait forever. The child starts with none and makes its own."""
    global _lock
    _pool.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def empty(shape: tuple[int, ...], like: np.ndarray) -> np.ndarray:
    """np.empty(shape, float32) at the same offset within a 4 KiB page as `like`'s data.

    For the output of the word lookup. A copy runs up to twice as slow when the array it
    writes starts a few bytes past the one it reads, modulo 4 KiB: the CPU holds back loads
    that look like reads of the stores just made (4K aliasing). Measured on bert-base: np.take
    of 256 rows took 173 us instead of 92 with the output 8 to 24 bytes past the word table
    (modulo 1 KiB, as rows are 3 KiB), and a batch on one thread 14% longer. At the table's
    own offset, every row is written a whole number of rows from where it is read.
    """
    if shape[0] <= BLOCK:  # one block: too little copying for it to matter
        return np.empty(shape, np.float32)
    nbytes = math.prod(shape) * 4
    buffer = np.empty(nbytes + PAGE, np.uint8)
    start = (like.ctypes.data - buffer.ctypes.data) % PAGE
    return buffer[start : start + nbytes].view(np.float32).reshape(shape)
