"""What the fast path makes once per weights and keeps as long as they live: the centered
(token type, position) table Rc, the centered word table Wc where it pays, gamma and beta as
rows, and the projection in float64.
"""

import os
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import shown
from npbert.layer.kernels import SHORT, center
from npbert.layer.product import wide_weight
from npbert.layer.weights import EmbeddingWeights, check_weights


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
ROWS = 512  # of the word table centered at a time


def _after_fork() -> None:
    """A forked child may inherit the lock held: it starts with its own."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


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
    stats = np.empty(ROWS, np.float32)
    for start in range(0, len(table), ROWS):
        rows = words[start : start + ROWS]
        rows[...] = table[start : start + ROWS]
        center(rows, weights.config.word_scale, stats[: len(rows)])
    with _lock:
        if record.mode != "never" and record.words is None:
            record.words = words
