"""Property-based: embed() against a float64 formula written here, on random shapes, integer
dtypes, memory layouts, positions and token types, with about 30% of the inputs made invalid
in one way or another: every valid one matches the formula, every invalid one raises
InputError (never a wrong result, never another exception)."""

import numpy as np
import pytest
from conftest import DATA, TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npbert
from npbert import InputError

BERT = npbert.load_weights(TINY)  # V 87, T 2, P 128, H 32
ROBERTA = npbert.load_weights(DATA / "tiny-roberta")  # padding_idx 1, P 66: 64 tokens at most
FAULTS = [
    "negative id",
    "id past the vocabulary",
    "token type past the table",
    "negative position",
    "position past the table",
    "too long",
    "fractional id",
    "token types of another shape",
    "mask value 2",
]


def formula(weights, ids, types, positions) -> np.ndarray:
    """LayerNorm((W + T) + P) in float64, from the stored weights."""
    x = (
        weights.word_embeddings[ids].astype(np.float64)
        + weights.token_type_embeddings[types]
        + weights.position_embeddings[positions]
    )
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    normalized = (x - mean) / np.sqrt(variance + weights.config.layer_norm_eps)
    return normalized * weights.layer_norm_weight + weights.layer_norm_bias


def padded_positions(ids: np.ndarray, padding_idx: int) -> np.ndarray:
    """RoBERTa's rule, written out token by token."""
    positions = np.empty_like(ids)
    for row in np.ndindex(ids.shape[:-1]):
        count = 0
        for i, token in enumerate(ids[row]):
            real = token != padding_idx
            count += real
            positions[(*row, i)] = padding_idx + count if real else padding_idx
    return positions


def layout(data, array: np.ndarray) -> np.ndarray:
    """The same values in another integer dtype and memory layout."""
    dtype = data.draw(st.sampled_from([np.int64, np.int32, np.int16, np.uint16, np.intp]))
    if array.min() < 0 and np.dtype(dtype).kind == "u":
        dtype = np.int64
    array = array.astype(dtype)
    kind = data.draw(st.sampled_from(["C", "F", "strided", "reversed"]))
    if kind == "F":
        return np.asfortranarray(array)
    if kind == "strided":  # every other element of a larger array
        wide = np.zeros((*array.shape[:-1], 2 * array.shape[-1]), dtype)
        wide[..., ::2] = array
        return wide[..., ::2]
    if kind == "reversed":
        return np.ascontiguousarray(array[..., ::-1])[..., ::-1]
    return array


def inputs(data, weights, fault):
    """(input_ids, token_type_ids, position_ids, attention_mask), valid unless `fault`."""
    config = weights.config
    batched = data.draw(st.booleans())
    limit = config.max_length + (1 if fault == "too long" else 0)
    length = limit if fault == "too long" else data.draw(st.integers(1, min(limit, 40)))
    shape = (data.draw(st.integers(1, 4)), length) if batched else (length,)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, config.vocab_size, shape)
    types = rng.integers(0, config.type_vocab_size, shape)
    positions = None
    # Explicit positions in range make any length valid (the module looks them up as given).
    if config.positions == "absolute" and fault != "too long" and data.draw(st.booleans()):
        positions = rng.integers(0, config.max_position_embeddings, shape)
    mask = rng.integers(0, 2, shape) if data.draw(st.booleans()) else None
    spot = tuple(int(rng.integers(0, n)) for n in shape)
    if fault == "negative id":
        ids[spot] = -int(rng.integers(1, 5))
    elif fault == "id past the vocabulary":
        ids[spot] = config.vocab_size + int(rng.integers(0, 5))
    elif fault == "token type past the table":
        types[spot] = config.type_vocab_size
    elif fault in ("negative position", "position past the table"):
        positions = rng.integers(0, config.max_position_embeddings, shape)
        positions[spot] = -1 if fault == "negative position" else config.max_position_embeddings
    elif fault == "too long" and config.padding_idx is not None:  # RoBERTa counts real tokens
        ids[ids == config.padding_idx] = config.padding_idx + 1
    elif fault == "fractional id":
        ids = ids.astype(np.float64)
        ids[spot] += 0.5
    elif fault == "token types of another shape":
        types = types[..., :-1] if length > 1 else np.zeros((*shape, 2), np.int64)
    elif fault == "mask value 2":
        mask = np.ones(shape, np.int64)
        mask[spot] = 2
    if fault != "fractional id":
        ids = layout(data, ids)
    return ids, layout(data, types), positions, mask


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_embed_matches_the_formula_or_refuses(data):
    weights = data.draw(st.sampled_from([BERT, ROBERTA]))
    faulty = data.draw(st.integers(0, 9)) < 3  # about 30% invalid
    fault = data.draw(st.sampled_from(FAULTS)) if faulty else None
    if fault in ("negative position", "position past the table") and weights is ROBERTA:
        fault = "negative id"  # RoBERTa's positions are derived; a bad id is bad there too
    ids, types, positions, mask = inputs(data, weights, fault)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    threads = data.draw(st.sampled_from([None, 1, 2]))
    if fault is not None:
        with pytest.raises(InputError):
            npbert.embed(weights, ids, types, positions, mask, dtype=dtype, threads=threads)
        return
    output = npbert.embed(weights, ids, types, positions, mask, dtype=dtype, threads=threads)
    if positions is None:
        positions = (
            np.broadcast_to(np.arange(ids.shape[-1]), ids.shape)
            if weights.config.positions == "absolute"
            else padded_positions(np.asarray(ids), weights.config.padding_idx)
        )
    expected = formula(weights, np.asarray(ids), np.asarray(types), positions)
    assert output.dtype == dtype and output.shape == expected.shape
    np.testing.assert_allclose(
        output, expected, rtol=0, atol=1e-5 if dtype is np.float32 else 1e-12
    )
