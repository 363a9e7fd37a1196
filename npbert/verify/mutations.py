"""The specification run again with one thing changed, as a buggy port computes it: the Case a
compare was made of, and the steps the catalog's mutants (npbert.verify.bugs) are written with.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npbert.errors import InputError
from npbert.layer.embedding import linear
from npbert.layer.weights import EmbeddingWeights
from npbert.model import embed_stages


@dataclass(frozen=True)
class Case:
    """What the reference was computed from: the weights, and the inputs as the layer took
    them (the family's defaults filled in: npbert.layer.inputs.prepare_inputs); mask, the
    (B, L) attention mask of the real tokens (None: all real); reference, its float64 stages."""

    weights: EmbeddingWeights
    input_ids: np.ndarray  # (B, L) or (L,)
    token_type_ids: np.ndarray | None  # like input_ids; None without a table
    position_ids: np.ndarray | None  # (L,) or like input_ids; None without a table
    layer_mask: np.ndarray | None  # the attention_mask the layer takes (DeBERTa's), or None
    mask: np.ndarray | None  # (B, L) or (L,) of 0 and 1, the real tokens; None: all real
    reference: dict

    @property
    def config(self):
        return self.weights.config


def rerun(case: Case, weights: EmbeddingWeights | None = None, **inputs) -> dict | None:
    """embed_stages in float64 with `weights` or some inputs changed; None where the changed
    inputs are not ones the layer takes (an id past its table: the port would crash there)."""
    given = {
        "token_type_ids": case.token_type_ids,
        "position_ids": case.position_ids,
        "attention_mask": case.layer_mask,
    }
    given.update(inputs)
    ids = given.pop("input_ids", case.input_ids)
    try:
        return embed_stages(weights or case.weights, ids, **given, dtype=np.float64, project=True)
    except InputError:
        return None


def after_sum(case: Case, norm: Callable, affine: Callable) -> dict:
    """The reference's stages with its LayerNorm computed as norm(x) then affine(normalized),
    x the stage it normalizes (the sum, DeBERTa's projection of it, or the word rows alone),
    and the steps after it as the family has them (DeBERTa's mask, a projection after)."""
    stages = dict(case.reference)
    pre = next(stages[name] for name in ("embed_proj", "sum", "word") if name in stages)
    w = case.weights
    stages["normalized"] = norm(pre)  # (B, L, H)
    embeddings = affine(stages["normalized"], w.layer_norm_weight, w.layer_norm_bias)
    return stages | tail(case, embeddings)


def tail(case: Case, embeddings: np.ndarray) -> dict:
    """The stages after the LayerNorm: FNet's Linear, DeBERTa's mask, then a projection after
    the layer."""
    w = case.weights
    stages = {}
    if "layer_norm" in case.reference:  # FNet's layer ends with its Linear
        stages["layer_norm"] = embeddings
        embeddings = linear(embeddings, w.projection_weight, w.projection_bias)  # (B, L, H)
    if case.layer_mask is not None:
        embeddings = embeddings * case.layer_mask[..., None]  # (B, L, H)
    stages["embeddings"] = embeddings
    if "projected" in case.reference:
        stages["projected"] = linear(embeddings, w.projection_weight, w.projection_bias)
    return stages


def eps(case: Case) -> float:
    return case.config.layer_norm_eps


def tables(case: Case, rounding: Callable) -> EmbeddingWeights:
    """The weights with every array rounded by `rounding` (to float16 or bfloat16): of the
    word table, the rows the inputs look up (the rest are never read, and rounding all of a
    large vocabulary's would be most of the diagnosis's time)."""
    w = case.weights
    arrays = {
        field.name: rounding(getattr(w, field.name)).astype(np.float32)
        for field in dataclasses.fields(w)
        if isinstance(getattr(w, field.name), np.ndarray) and field.name != "word_embeddings"
    }
    word = np.array(w.word_embeddings)
    rows = np.unique(case.input_ids)
    word[rows] = rounding(word[rows])
    return dataclasses.replace(w, word_embeddings=word, **arrays)
