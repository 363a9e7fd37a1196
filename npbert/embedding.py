"""BERT's embedding layer: the math, and nothing else.

    embeddings = LayerNorm(word_embeddings[input_ids]
                           + token_type_embeddings[token_type_ids]
                           + position_embeddings[position_ids])

All three tables are learned parameters, trained with the rest of the model (BERT's
position embeddings are not the fixed sinusoids of the original Transformer, and its
segment embeddings are two learned vectors, not vectors of zeros and ones).

Shapes: B batch, L sequence length, H hidden size, V vocabulary size,
P max_position_embeddings, T type_vocab_size. Leading (B,) is optional throughout.

This module imports nothing but NumPy and checks nothing: npbert.model.embed validates
the ids first, because NumPy would silently wrap a negative id to the table's last row.
"""

import numpy as np

# The stages of the layer, in the order they are computed (what `embedding_stages` returns).
STAGES = ("word", "position", "token_type", "sum", "normalized", "embeddings")


def lookup(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """An embedding is a row lookup: table (N, H), ids (...) int -> (..., H)."""
    return table[ids]


def normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """Zero mean, unit variance over the hidden axis: x (..., H) -> (..., H)."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centered = x - mean  # (..., H)
    # Biased variance (divide by H, not H-1), as torch.nn.LayerNorm; two passes over x,
    # because E[x^2] - E[x]^2 cancels catastrophically when the mean is large.
    variance = (centered * centered).mean(axis=-1, keepdims=True)  # (..., 1)
    return centered / np.sqrt(variance + eps)  # (..., H)


def embedding_stages(
    input_ids: np.ndarray,  # (B, L) int, each in [0, V)
    token_type_ids: np.ndarray,  # (B, L) int, each in [0, T)
    position_ids: np.ndarray,  # (L,) or (B, L) int, each in [0, P)
    word_embeddings: np.ndarray,  # (V, H)
    position_embeddings: np.ndarray,  # (P, H)
    token_type_embeddings: np.ndarray,  # (T, H)
    gamma: np.ndarray,  # (H,) LayerNorm weight
    beta: np.ndarray,  # (H,) LayerNorm bias
    eps: float,  # layer_norm_eps, 1e-12 for BERT
    dtype: type = np.float32,
) -> dict[str, np.ndarray]:
    """Every intermediate of the layer, keyed by the names in STAGES, computed in `dtype`."""
    word = lookup(word_embeddings, input_ids).astype(dtype)  # (B, L, H)
    position = lookup(position_embeddings, position_ids).astype(dtype)  # (L, H) or (B, L, H)
    token_type = lookup(token_type_embeddings, token_type_ids).astype(dtype)  # (B, L, H)
    # Same order of addition as Hugging Face's BertEmbeddings: (word + token_type) + position.
    summed = word + token_type + position  # (B, L, H)
    # LayerNorm: normalize, then a learned per-dimension scale (gamma) and shift (beta).
    normalized = normalize(summed, eps)  # (B, L, H)
    embeddings = normalized * gamma.astype(dtype) + beta.astype(dtype)  # (B, L, H)
    # Dropout comes next in BertEmbeddings; at inference it is the identity, so it is left out.
    stages = (word, position, token_type, summed, normalized, embeddings)
    return dict(zip(STAGES, stages, strict=True))


# The fast path: the same computation restructured for speed, not for reading. Tokens go
# through in blocks that stay in cache, every step in place, across threads (npbert.fast);
# no temporary is the size of the output. Each step is the same NumPy operation on the same
# values as above, in the same order, so the result is bit-identical to embedding_stages,
# and a row's result does not depend on the block or batch it is in.


def embed_block(
    out: np.ndarray,  # (n, H) float32, written in place
    input_ids: np.ndarray,  # (n,) int
    word_embeddings: np.ndarray,  # (V, H)
    token_type_runs: list,  # [(start, stop, rows)]: token_type_embeddings[token_type_ids]
    # looked up, run by run; rows (stop - start, H)
    position_rows: np.ndarray,  # (n, H): position_embeddings[position_ids], looked up
    gamma: np.ndarray,  # (H,), or tiled to (n, H)
    beta: np.ndarray,  # (H,), or tiled to (n, H)
    eps: float,
    scratch: np.ndarray,  # (n, H) float32, overwritten (it may hold position_rows)
    row_stats: np.ndarray,  # (n, 1) float32, overwritten
) -> None:
    """The layer for a block of n tokens, float32, into `out`.

    x.mean(-1) is spelled add.reduce then divide, which is what NumPy's mean does, without its
    Python wrapper: threads wait for each other there, holding the GIL. Lookups use
    take(mode="clip") because the default mode="raise" buffers `out` (a copy, 3x slower);
    the ids are in range already, so clipping never moves one.
    """
    hidden = out.shape[-1]
    np.take(word_embeddings, input_ids, axis=0, out=out, mode="clip")  # word, (n, H)
    for start, stop, rows in token_type_runs:
        out[start:stop] += rows  # word + token_type
    out += position_rows  # + position: the sum
    mean = np.add.reduce(out, axis=-1, keepdims=True, out=row_stats)
    mean /= hidden  # (n, 1)
    out -= mean  # centered
    variance = np.add.reduce(np.multiply(out, out, out=scratch), -1, keepdims=True, out=mean)
    variance /= hidden  # (n, 1)
    variance += eps
    out /= np.sqrt(variance, out=variance)  # normalized
    out *= gamma
    out += beta  # embeddings, (n, H)
