"""The fast path behind npbert.embed: every family's layer, restructured for speed.

npbert.layer.embedding is the specification; this computes the same layer in fewer passes over
memory, in blocks of tokens that stay in cache, in place, on several threads. It uses one fact
about LayerNorm: centering is linear. For x = w + r, a word row w plus the rest r (the
token-type row plus the position row), x - mean(x) = (w - mean(w)) + (r - mean(r)). With both
kinds of rows centered ahead of time (npbert.layer.tables), a token is centered by one addition:

    xc  = Wc[input_ids] + Rc[token_type_ids, position_ids]      # centered rows, (n, E)
    out = xc / sqrt(sum(xc ** 2) / E + eps) * gamma + beta       # (n, E)

Rc holds every (token type, position) pair's row, summed and centered in float64 and rounded
once. Wc is as big as the word table, so until it pays to make it, a word row is centered as it
is looked up, with the same float32 operations: the result is the same bit for bit either way,
and a text embeds identically alone or in any batch, in blocks of any size, on any number of
threads. Products (DeBERTa's projection E -> H before its LayerNorm; the one after the layer of
ALBERT, ELECTRA and RoFormer) are npbert.layer.product's: the exact value, rounded once.

This rounds otherwise than the specification, which adds the rows one by one in the family's
order and centers their sum: the tests hold the two within 2e-6, or 4 float32 steps of the
largest output where outputs are large, and this path about as close as torch to the float64
reference (tests/test_families.py; scripts/bench.py measures it). Centering each table apart
loses digits where the tables cancel (a dimension of +10 in every word row and -10 in every
position row), and gamma is a pass of its own, not folded into the tables, because rounding
each product before the sum put the outputs further from float64 than torch's.
"""

from dataclasses import dataclass

import numpy as np

from npbert.layer import embedding
from npbert.layer.cores import cpus
from npbert.layer.kernels import center, empty, normalize_centered
from npbert.layer.pool import run
from npbert.layer.product import rounded_product
from npbert.layer.tables import Derived, added_rows, derived, note_tokens, wide_projection

# Tokens per block: long enough that NumPy's calls, not Python, take the time, and the GIL
# changes hands seldom between threads; short enough that a block stays in a core's cache.
BLOCK = 512


def embed(weights, inputs, *, project: bool, threads: int | None) -> np.ndarray:
    """weights.config's layer for validated npbert.layer.inputs.Inputs, float32, (..., L, E)."""
    config = weights.config
    if config.family.layer is embedding.mobilebert:  # its product comes first, if any
        return words_projected(weights, inputs)
    if not config.family.fast_path:  # a few elementwise steps: the specification is as fast
        return config.family.layer(weights, *inputs[:4], np.float32)["embeddings"]
    input_ids = inputs.input_ids.reshape(-1, inputs.input_ids.shape[-1])  # (B, L)
    batch, length = input_ids.shape
    threads = threads or cpus()
    record = derived(weights)
    plan = Plan.make(weights, record, inputs, batch, length, BLOCK)
    shape = (batch * length, config.output_size)
    out = empty(shape, plan.words) if len(plan.blocks) > 1 else np.empty(shape, np.float32)
    run(plan.work(out, input_ids.reshape(-1)), plan.blocks, threads)
    note_tokens(weights, record, batch * length)
    if config.projection == "last" or (project and config.projection == "after"):
        out = apply_projection(weights, out)  # (B * L, H)
    out = out.reshape(batch, length, -1)  # (B, L, E or H)
    return out if inputs.input_ids.ndim == 2 else out[0]


@dataclass(slots=True)
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
    def make(cls, weights, record: Derived, inputs, batch: int, length: int, block: int):
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
        size = self.blocks[0][1] - self.blocks[0][0]  # tokens in the largest block: the first
        buffer = row_buffer(size, out.shape[1])  # the rows normalize_centered divides
        block = self.block(out, input_ids)

        def work(share) -> None:
            scratch = self.scratch(size)  # each thread's own
            with np.errstate():  # restores this thread's buffer size when it leaves
                if buffer is not None:
                    np.setbufsize(buffer)
                for start, stop in share:
                    block(start, stop, *scratch)

        return work

    def block(self, out: np.ndarray, input_ids: np.ndarray):
        """The function that computes one block of tokens, [start, stop), into out."""
        inside = self.weights.config.projection == "inside"  # DeBERTa: E -> H in the layer
        eps = np.float32(self.weights.config.layer_norm_eps)
        # Looked up once a call, not once a block: a block's Python costs about a pass over it.
        words, centered, mask, affine = self.words, self.centered, self.mask, self.affine
        add, scale = self.add, self.weights.config.word_scale
        projection = wide_projection(self.weights) if inside else None  # (H, E + 1) float64

        def block(start: int, stop: int, gathered, unprojected, stats) -> None:
            n = stop - start
            x = unprojected[:n] if inside else out[start:stop]  # (n, E)
            np.take(words, input_ids[start:stop], 0, x, "clip")  # "raise" copies behind
            if not (centered or inside):
                center(x, scale, stats[:n])
            add(x, start, stop, gathered)
            if inside:  # projected, then centered as a word row is
                rounded_product(x, projection, out[start:stop])  # (n, H)
                center(out[start:stop], 1.0, stats[:n])
            normalize_centered(out[start:stop], eps, affine, stats[:n])
            if mask is not None:
                out[start:stop] *= mask[start:stop]

        return block

    def scratch(self, size: int) -> tuple:
        """A thread's scratch for blocks of up to `size` tokens, only where a block needs it:
        a few MB allocated and not used still cost an mmap and an munmap."""
        width = self.words.shape[1]
        gathers = self.added is not None and self.tile is None  # added rows gathered per block
        inside = self.weights.config.projection == "inside"
        gathered = np.empty((size if gathers else 0, width), np.float32)  # added rows
        unprojected = np.empty((size if inside else 0, width), np.float32)  # DeBERTa's
        return gathered, unprojected, np.empty(size, np.float32)

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
    per block, and a buffer of one row makes NumPy run it markedly faster at widths from 256
    (scripts/bench.py); below that, and for a few rows, where setting the size costs more than
    it saves, NumPy's own stays. Results are the same bit for bit: the buffer decides how NumPy
    walks the arrays, not what it computes (reductions over a row are not buffered).
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
    """The projection E -> H applied after the layer (ALBERT's), last in it (FNet's), or to
    its word rows (MobileBERT's, of 3E): x (..., E) float32 -> (..., H) float32, each row
    rounded as it would be in any batch."""
    rows = x.reshape(-1, x.shape[-1])  # (n, E)
    projected = np.empty((len(rows), weights.projection_weight.shape[0]), np.float32)
    rounded_product(rows, wide_projection(weights), projected)  # (n, H)
    return projected.reshape(*x.shape[:-1], -1)  # (..., H)


def words_projected(weights, inputs) -> np.ndarray:
    """MobileBERT's layer in float32: the specification's steps with its product rounded once
    per row (npbert.layer.product), so that no row depends on the others of its batch."""
    config = weights.config
    word = embedding.lookup(weights.word_embeddings, inputs.input_ids, np.float32)  # (..., L, E)
    x = embedding.trigram(word) if config.trigram else word  # (..., L, 3E)
    if config.projection:  # a trigram, or E != H
        x = apply_projection(weights, x)  # (..., L, H)
    types, positions = inputs.token_type_ids, inputs.position_ids
    return embedding.mobilebert_rest(weights, x, types, positions, np.float32)["embeddings"]


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
