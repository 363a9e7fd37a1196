"""`npbert explain`: the seeds' notebook as a command, one step of the layer at a time.

Every number printed is computed here, step by step, with npbert.embedding's functions, and the
result is checked against npbert.embed (the function users call).
"""

import numpy as np

from npbert.checkpoint import EmbeddingWeights
from npbert.embedding import lookup, normalize
from npbert.model import embed

SHOWN = 3  # values shown at each end of a row, as torch prints tensors


def format_row(row: np.ndarray) -> str:
    """[ 0.0136 -0.0265 -0.0235 ...  0.0087  0.0071  0.0151]"""
    values = (*row[:SHOWN], None, *row[-SHOWN:]) if row.size > 2 * SHOWN else tuple(row)
    return "[" + " ".join("   ..." if v is None else f"{v:7.4f}" for v in values) + "]"


def _rows(title: str, labels: list[str], matrix: np.ndarray, limit: int = 12) -> list[str]:
    """A title, then one labelled row per token (the middle elided past `limit` tokens)."""
    width = max(len(label) for label in labels)
    keep = range(len(labels))
    if len(labels) > limit:
        keep = [*range(limit // 2), None, *range(len(labels) - limit // 2, len(labels))]
    lines = [title]
    for i in keep:
        lines.append("   ..." if i is None else f"   {labels[i]:<{width}}  {format_row(matrix[i])}")
    return lines


# The step-by-step output must equal embed() to this max |diff|: embed() is the fast path,
# which rounds in another order (about 1e-6), and 1e-5 is the tolerance against torch.
TOLERANCE = 1e-5


def explain(
    weights: EmbeddingWeights, tokens: list[str], input_ids, token_type_ids
) -> tuple[str, float]:
    """(the walk-through, max |diff| against embed()) for input_ids, token_type_ids (L,) int."""
    input_ids = np.asarray(input_ids)
    token_type_ids = np.asarray(token_type_ids)
    length, hidden, eps = len(input_ids), weights.hidden_size, weights.layer_norm_eps
    position_ids = np.arange(length)  # (L,)

    word = lookup(weights.word_embeddings, input_ids)  # (L, H)
    position = lookup(weights.position_embeddings, position_ids)  # (L, H)
    token_type = lookup(weights.token_type_embeddings, token_type_ids)  # (L, H)
    summed = word + token_type + position  # (L, H)
    normalized = normalize(summed, eps)  # (L, H)
    output = normalized * weights.layer_norm_weight + weights.layer_norm_bias  # (L, H)
    reference = embed(weights, input_ids, token_type_ids)  # (L, H)
    diff = float(np.abs(output - reference).max())

    labels = [f"{i:>3} {token}" for i, token in enumerate(tokens)]
    header = f"   {'pos':>3} {'token':<14} {'input_id':>8}  token_type_id"
    table = [
        f"   {i:>3} {t:<14} {int(w):>8}  {int(s)}"
        for i, (t, w, s) in enumerate(zip(tokens, input_ids, token_type_ids, strict=True))
    ]
    types = ", ".join(str(t) for t in sorted(set(token_type_ids.tolist())))
    lines = [
        f"BERT's embedding layer, step by step: {length} tokens, hidden size {hidden}",
        "",
        "1. Tokens (WordPiece) and their ids",
        header,
        *table,
        "",
        *_rows(
            f"2. Token embeddings: rows of word_embeddings {weights.word_embeddings.shape}, a "
            "learned table. Context-free: a token gets the same row in every sentence.",
            labels,
            word,
        ),
        "",
        *_rows(
            f"3. Segment embeddings: rows {types} of token_type_embeddings "
            f"{weights.token_type_embeddings.shape}. Learned vectors, one per segment "
            "(A = 0: [CLS] A [SEP]; B = 1: B [SEP]), not vectors of zeros and ones.",
            labels,
            token_type,
        ),
        "",
        *_rows(
            f"4. Position embeddings: rows 0..{length - 1} of position_embeddings "
            f"{weights.position_embeddings.shape}. Learned in pre-training like the token "
            "table, not the fixed sinusoids of the original Transformer.",
            labels,
            position,
        ),
        "",
        *_rows("5. Sum: token + segment + position", labels, summed),
        "",
        *_rows(
            f"6. LayerNorm over the {hidden} values of each token: "
            f"(x - mean) / sqrt(var + {eps:g}) * gamma + beta, gamma and beta learned",
            labels,
            output,
        ),
        "",
        "7. Dropout: the identity at inference, so the LayerNorm output is the layer's output.",
        "",
        f"Check: this equals npbert.embed(): max |diff| = {diff:.3g} "
        + (f"(equal within {TOLERANCE:g})" if diff <= TOLERANCE else "(MISMATCH)"),
    ]
    return "\n".join(lines), diff
