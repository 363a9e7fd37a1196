"""npbert's public API: load the weights, embed ids, or embed text with an Embedder."""

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.checkpoint import EmbeddingWeights, load_checkpoint
from npbert.embedding import embed_block, embedding_stages
from npbert.errors import InputError
from npbert.inputs import prepare_ids


def resolve(model: str | Path, *, revision: str | None = None, full: bool = False):
    """A local checkpoint directory as is, or a Hub repo id fetched into the cache.

    Returns (directory, source) where source records the model and, for the Hub, the commit.
    From the Hub only the embedding tensors are fetched, unless full=True.
    """
    from npbert import hub

    return hub.resolve(str(model), revision=revision, full=full)


def load_weights(
    model: str | Path, *, revision: str | None = None, full: bool = False
) -> EmbeddingWeights:
    """The five embedding tensors of a checkpoint (local directory or Hub repo id) as float32.

    revision: a Hub branch, tag or commit sha. full: download the whole weights file.
    """
    directory, source = resolve(model, revision=revision, full=full)
    return load_checkpoint(directory, source)


def validated(weights: EmbeddingWeights, input_ids, token_type_ids, position_ids):
    """The ids checked against these weights' tables, with defaults filled (npbert.inputs)."""
    return prepare_ids(
        input_ids,
        token_type_ids,
        position_ids,
        vocab_size=weights.vocab_size,
        type_vocab_size=weights.type_vocab_size,
        max_positions=weights.max_position_embeddings,
    )


def embed_stages(
    weights: EmbeddingWeights,
    input_ids,
    token_type_ids=None,
    position_ids=None,
    *,
    dtype: type = np.float32,
) -> dict[str, np.ndarray]:
    """Every stage of the layer (npbert.embedding.STAGES) for validated ids, in `dtype`.

    input_ids (L,) or (B, L) int; token_type_ids the same shape (default all 0);
    position_ids (L,) or (B, L) (default 0..L-1). Lookups (..., L, H), output (..., L, H).
    """
    input_ids, token_type_ids, position_ids = validated(
        weights, input_ids, token_type_ids, position_ids
    )
    return embedding_stages(
        input_ids,
        token_type_ids,
        position_ids,
        weights.word_embeddings,
        weights.position_embeddings,
        weights.token_type_embeddings,
        weights.layer_norm_weight,
        weights.layer_norm_bias,
        weights.layer_norm_eps,
        dtype=dtype,
    )


def embed(
    weights: EmbeddingWeights,
    input_ids,
    token_type_ids=None,
    position_ids=None,
    *,
    dtype: type = np.float32,
    threads: int | None = None,
) -> np.ndarray:
    """BERT's input embeddings: input_ids (L,) or (B, L) int -> (..., L, H) in `dtype`.

    Token types default to 0 and positions to 0..L-1. Bad ids raise InputError (a ValueError).
    float32 runs the fast path on `threads` threads (default: every core), bit-identical to
    the readable embed_stages. dtype=np.float64 computes every step in float64 from the
    stored weights: the exact reference.
    """
    if np.dtype(dtype) != np.float32:
        return embed_stages(weights, input_ids, token_type_ids, position_ids, dtype=dtype)[
            "embeddings"
        ]
    input_ids, token_type_ids, position_ids = validated(
        weights, input_ids, token_type_ids, position_ids
    )
    batch = np.atleast_2d(input_ids), np.atleast_2d(token_type_ids)  # (B, L) each
    out = np.empty((*batch[0].shape, weights.hidden_size), np.float32)  # (B, L, H)
    run_blocks(weights, out, *batch, position_ids, threads=threads)
    return out.reshape(*input_ids.shape, weights.hidden_size)


BLOCK = 256  # tokens per block, as measured for bert-base by scripts/bench.py
RUNS = 16  # token-type runs in a block up to which rows are added run by run, not gathered


def run_blocks(weights, out, input_ids, token_type_ids, position_ids, *, threads) -> None:
    """embed_block over blocks of whole rows (or of one row's columns, past BLOCK tokens),
    dealt out to threads. NumPy releases the GIL inside take and the ufuncs, so Python threads
    run in parallel.

    What does not change from block to block is looked up or tiled once per call instead of
    gathered per token: the position rows when every sequence has the same position_ids (the
    default), a token type's row for a block of one token type, gamma and beta. Adding a tiled
    row is the same arithmetic as adding a gathered one, only faster.
    """
    batch, length, hidden = out.shape
    rows, width = max(1, BLOCK // length), min(length, BLOCK)  # a block: rows x width tokens
    blocks = [
        (slice(r, r + rows), slice(c, c + width))
        for r in range(0, batch, rows)
        for c in range(0, length, width)
    ]
    size = min(rows, batch) * width  # tokens in the largest block

    def tile(rows: np.ndarray, count: int) -> np.ndarray:  # (..., H) -> (count * ..., H)
        tiled = np.empty((count, *rows.shape), np.float32)
        tiled[...] = rows  # one broadcast copy; np.tile took 20 times longer on 2-D rows
        return tiled.reshape(-1, hidden)

    gamma, beta = (tile(weights.layer_norm_weight, size), tile(weights.layer_norm_bias, size))
    type_rows = [tile(row, size) for row in weights.token_type_embeddings]  # T x (size, H)
    position_rows = None
    if position_ids.ndim == 1:  # shared by every sequence: (rows * L, H)
        position_rows = tile(weights.position_embeddings[position_ids], min(rows, batch))

    first_type = token_type_ids.flat[0]
    one_type = bool((token_type_ids == first_type).all())  # single sentences: no check per block

    def type_runs(types: np.ndarray, scratch: np.ndarray) -> list:
        """token_type_embeddings[types] as [(start, stop, rows)]: slices of tiled rows, one
        per run of one token type (one run for a single sentence, two per pair), or gathered
        when the runs are many."""
        if one_type:
            return [(0, len(types), type_rows[first_type][: len(types)])]
        starts = [0, *(np.flatnonzero(types[1:] != types[:-1]) + 1)]
        if len(starts) > RUNS:
            return [(0, len(types), np.take(weights.token_type_embeddings, types, 0, out=scratch))]
        stops = [*starts[1:], len(types)]
        return [(a, b, type_rows[types[a]][: b - a]) for a, b in zip(starts, stops, strict=True)]

    def work(share) -> None:  # takes blocks from `share` until there are none left
        scratch = np.empty((2, size, hidden), np.float32)
        row_stats = np.empty((size, 1), np.float32)
        for block_rows, block_columns in share:
            block = out[block_rows, block_columns].reshape(-1, hidden)  # a view: (n, H)
            n = len(block)
            types = token_type_ids[block_rows, block_columns].reshape(-1)  # (n,)
            token_types = type_runs(types, scratch[0, :n])
            if position_rows is not None:
                positions = position_rows[block_columns.start : block_columns.start + n]
            else:
                ids = position_ids[block_rows, block_columns].reshape(-1)
                positions = np.take(weights.position_embeddings, ids, 0, out=scratch[1, :n])
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


@dataclass(frozen=True, eq=False)
class EmbedderOutput:
    """Embeddings of tokenized text with the inputs that produced them.

    For a list of texts: embeddings (B, L, H) float32, the rest (B, L) int64, padded to the
    longest text (attention_mask 0 on padding). For a single text the batch axis is dropped.
    """

    embeddings: np.ndarray
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list


class Embedder:
    """A tokenizer and the embedding weights of one checkpoint: text in, embeddings out."""

    def __init__(self, weights: EmbeddingWeights, tokenizer):
        self.weights = weights
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(
        cls, model: str | Path, *, revision: str | None = None, full: bool = False
    ) -> "Embedder":
        """Load from a local checkpoint directory or a Hub repo id (see load_weights)."""
        from npbert.tokenize import load_tokenizer

        directory, source = resolve(model, revision=revision, full=full)
        return cls(load_checkpoint(directory, source), load_tokenizer(directory))

    def encode(self, texts: list[str], pairs: list[str] | None = None, *, truncation=False):
        """Tokenize a batch: npbert.tokenize.Encoding with (B, L) arrays."""
        from npbert.tokenize import encode

        return encode(
            self.tokenizer,
            texts,
            pairs,
            max_length=self.weights.max_position_embeddings,
            pad_token_id=self.weights.pad_token_id,
            truncation=truncation,
        )

    def __call__(
        self,
        texts: str | list[str],
        pairs: str | list[str] | None = None,
        *,
        truncation: bool = False,
    ) -> EmbedderOutput:
        """Embed a text, a list of texts, or texts with `pairs` (sentence B for each text)."""
        single = isinstance(texts, str)
        if isinstance(pairs, str) and not single:
            raise InputError("pairs must be a list with one pair per text when texts is a list")
        if single:
            texts = [texts]
            pairs = None if pairs is None else [pairs]
        pairs = None if pairs is None else list(pairs)
        encoding = self.encode(list(texts), pairs, truncation=truncation)
        embeddings = embed(self.weights, encoding.input_ids, encoding.token_type_ids)
        arrays = (embeddings, encoding.input_ids, encoding.token_type_ids, encoding.attention_mask)
        if single:
            return EmbedderOutput(*(a[0] for a in arrays), tokens=encoding.tokens[0])
        return EmbedderOutput(*arrays, tokens=encoding.tokens)
