"""Known porting bugs of the steps some families add, as mutations of the specification
(entries of npbert.verify.bugs.CATALOG): the attention mask's zeroing (DeBERTa, ESM), ESM's
token dropout, MobileBERT's trigram, FNet's last Linear."""

import dataclasses

import numpy as np

from npbert.layer.embedding import linear, mobilebert_rest, scale_shift
from npbert.verify.mutations import Case, rerun


def padding_kept(case: Case):
    """The output not multiplied by the attention mask (the rest, ESM's token dropout too,
    computed with it)."""
    if case.layer_mask is None or case.layer_mask.all():
        return
    stages, w = dict(case.reference), case.weights
    if "normalized" in stages:
        unmasked = scale_shift(stages["normalized"], w.layer_norm_weight, w.layer_norm_bias)
    else:  # ESM without a norm
        unmasked = stages.get("sum", stages["word"])
    yield None, stages | {"embeddings": unmasked}


def token_dropout_left_out(case: Case):
    """ESM's word rows as looked up: no <mask> row zeroed, no rescaling."""
    if case.config.mask_token_id is not None:
        config = dataclasses.replace(case.config, mask_token_id=None)
        yield None, rerun(case, dataclasses.replace(case.weights, config=config))


def token_dropout_over_padding(case: Case):
    """ESM's share of <mask> tokens counted over every token, padding too."""
    mask = case.layer_mask
    if case.config.mask_token_id is None or mask is None or mask.all():
        return
    stages = rerun(case, attention_mask=None)
    if stages is not None:
        yield None, stages | {"embeddings": stages["embeddings"] * mask[..., None]}


def trigram_reversed(case: Case):
    """MobileBERT's trigram as [previous, this, next], not [next, this, previous]."""
    stages, w = case.reference, case.weights
    if "trigram" not in stages:
        return
    width = stages["word"].shape[-1]
    following, word, preceding = np.split(stages["trigram"], [width, 2 * width], axis=-1)
    reversed_ = np.concatenate([preceding, word, following], axis=-1)  # (B, L, 3E)
    x = linear(reversed_, w.projection_weight, w.projection_bias)  # (B, L, H)
    rest = mobilebert_rest(w, x, case.token_type_ids, case.position_ids, np.float64)
    yield None, dict(stages) | {"trigram": reversed_, "embedding_transformation": x} | rest


def last_linear_left_out(case: Case):
    """FNet's output taken from its LayerNorm, the Linear its layer ends with left out."""
    if "layer_norm" in case.reference:
        yield None, dict(case.reference) | {"embeddings": case.reference["layer_norm"]}
