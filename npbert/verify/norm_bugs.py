"""Known porting bugs of the layer's norm, as mutations of the specification (entries of
npbert.verify.bugs.CATALOG): another eps, the variance over H - 1, gamma and beta swapped or
left out, a LayerNorm where the layer has NoNorm or no norm at all."""

import numpy as np

from npbert.layer.embedding import normalize, scale_shift
from npbert.verify.mutations import Case, after_sum, eps

EPSILONS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13)


def other_eps(case: Case):
    if case.config.norm != "layer_norm":  # Megatron-BERT's layer has none to get wrong
        return
    for value in EPSILONS:
        if not np.isclose(value, eps(case), rtol=1e-3, atol=0):
            yield value, after_sum(case, lambda x, e=value: normalize(x, e), scale_shift)


def unbiased_variance(case: Case):
    if case.config.norm != "layer_norm":
        return

    def norm(x):  # the variance divided by H - 1, as torch.var and numpy's ddof=1 have it
        centered = x - x.mean(axis=-1, keepdims=True)  # (B, L, H)
        variance = (centered * centered).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)
        return centered / np.sqrt(variance + eps(case))  # (B, L, H)

    yield None, after_sum(case, norm, scale_shift)


def swapped_affine(case: Case):
    if case.config.norm is not None and case.weights.layer_norm_bias is not None:
        yield None, after_sum(case, own_norm(case), lambda n, g, b: scale_shift(n, b, g))


def no_affine(case: Case):
    if case.config.norm is not None:
        yield None, after_sum(case, own_norm(case), lambda n, g, b: n)


def own_norm(case: Case):
    """The case's norm before its scale and shift: LayerNorm's statistics, or NoNorm's none."""
    if case.config.norm == "layer_norm":
        return lambda x: normalize(x, eps(case))
    return lambda x: x


def layer_norm_for_no_norm(case: Case):
    """A LayerNorm where MobileBERT's NoNorm only scales and shifts."""
    if case.config.norm == "no_norm":
        for value in (1e-12, 1e-5):
            yield value, after_sum(case, lambda x, e=value: normalize(x, e), scale_shift)


def norm_where_none(case: Case):
    """A LayerNorm (without weights: the checkpoint has none) where the layer has none: a port
    of Megatron-BERT or XLM-RoBERTa-XL written from BERT's."""
    if case.config.norm is None and "sum" in case.reference:
        for value in (1e-12, 1e-5):
            yield value, after_sum(case, lambda x, e=value: normalize(x, e), lambda n, g, b: n)
