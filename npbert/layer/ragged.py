"""Texts embedded back to back, without padding: what the corpus job and the Ray engine run.

A padded (B, L) batch makes the layer compute rows for its padding. But every step of the
layer works on one token at a time (its word row, its token-type and position rows, the
LayerNorm over its own H values), so the texts' tokens can go through as one run instead:

    input_ids       (N,)   every text's ids, one text after another (N = sum of lengths)
    token_type_ids  (N,)
    position_ids    (N,)   restarting at each text, as the family numbers them
    -> embeddings   (N, E) each text's rows where its ids are: a shard as written to disk

npbert.layer.fast computes each token the same way whatever surrounds it, so a text's rows here
are bit for bit those of the text embedded alone (tests/test_stream.py checks it).
"""

from itertools import chain

import numpy as np

from npbert.errors import InputError
from npbert.layer import fast
from npbert.layer.inputs import Inputs, check_range, check_token_dropout


def position_ids(config, input_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """(N,) each token's position within its text, as config's family numbers positions:
    0..L_i-1 (from position_offset), or RoBERTa's padding_idx + 1 onwards for real tokens;
    None without a table."""
    if config.positions == "none":
        return None
    starts = np.cumsum(lengths) - lengths  # (n,) where each text begins
    if config.positions == "absolute":
        return np.arange(len(input_ids)) - np.repeat(starts, lengths) + config.position_offset
    real = input_ids != config.padding_idx  # (N,) RoBERTa: a pad id inside a text is padding
    counted = np.cumsum(real)
    before = np.concatenate([[0], counted])[starts]  # real tokens before each text
    return (counted - np.repeat(before, lengths)) * real + config.padding_idx


def prepare(config, input_ids, token_type_ids, lengths) -> Inputs:
    """Validated Inputs for texts back to back: ids (N,) in range, lengths (n,) that add up
    to N, each text within the positions the family has."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.sum() != len(input_ids) or (lengths < 0).any():
        raise InputError(f"lengths add up to {lengths.sum()}, but there are {len(input_ids)} ids")
    if config.max_length is not None and lengths.max() > config.max_length:
        text = int(np.argmax(lengths))
        raise InputError(
            f"text {text} has {lengths[text]} tokens, more than the model's {config.max_length}"
        )
    ids = check_range("input_ids", np.asarray(input_ids), "word_embeddings", config.vocab_size)
    types = None
    if config.type_vocab_size:
        types = check_range(
            "token_type_ids", np.asarray(token_type_ids), "token_type_embeddings",
            config.type_vocab_size,
        )  # fmt: skip
    return Inputs(ids, types, position_ids(config, ids, lengths), None)


def text_slices(lengths: np.ndarray) -> list[slice]:
    """Each text's slice of the (N,) run, but empty texts' (a tokenizer without special
    tokens makes nothing of an empty line): they have no rows."""
    ends = np.cumsum(lengths)
    return [slice(int(end - n), int(end)) for n, end in zip(lengths, ends, strict=True) if n]


def embed_alone(weights, inputs: Inputs, threads: int | None) -> np.ndarray:
    """One text, checked as prepare_inputs checks a sequence for ESM's token dropout."""
    if weights.config.mask_token_id is not None:
        check_token_dropout(weights.config.mask_token_id, inputs.input_ids, None)
    return fast.embed(weights, inputs, project=False, threads=threads)


def embed_encodings(weights, encodings: list, *, threads: int | None = 1) -> dict[str, np.ndarray]:
    """tokenizers Encodings (unpadded) -> a shard's arrays, the texts back to back:
    embeddings (N, E) float32, input_ids and token_type_ids (N,) int64, lengths (n,) int64."""
    lengths = np.array([len(encoding.ids) for encoding in encodings], dtype=np.int64)
    count = int(lengths.sum())  # fromiter: twice as fast as concatenate, and takes no texts
    input_ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), np.int64, count)
    token_type_ids = np.fromiter(
        chain.from_iterable(e.type_ids for e in encodings), np.int64, count
    )
    if len(input_ids) == 0:  # only texts a tokenizer without special tokens made nothing of
        embeddings = np.empty((0, weights.config.output_size), np.float32)
    else:
        inputs = prepare(weights.config, input_ids, token_type_ids, lengths)
        if not weights.config.per_text:
            embeddings = fast.embed(weights, inputs, project=False, threads=threads)  # (N, E)
        else:  # MobileBERT's trigram, ESM's token dropout: one text at a time
            embeddings = np.concatenate([
                embed_alone(weights, Inputs(*(a if a is None else a[s] for a in inputs[:3]), None),
                            threads)
                for s in text_slices(lengths)
            ])  # fmt: skip
    return {
        "embeddings": embeddings,
        "lengths": lengths,
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
    }
