"""Known porting bugs of the embedding layer, as data: each a named mutation of the
specification, computing the layer as the buggy port does, from the same weights and inputs.
Ports get these wrong in the wild (llama.cpp, candle, ONNX Runtime, text-embeddings-inference,
rust-bert, transformers itself); npbert.verify.diagnosis tries each entry that applies,
parameters fitted, and names those that reproduce a failing candidate. Forms an output should
not have (dropout, a pooled vector, float16 values) are told there, from the output.

An entry: its name; what the port computed (`what`, said after "matches the reference with")
and how to fix it (`fix`), with {value} (the fitted parameter) and {expected} (the
checkpoint's own); `mutants(case)` yields (value, stages) for each parameter tried, the stages
named as embed_stages names them.
"""

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from npbert.layer.embedding import linear, normalize, scale_shift, sinusoidal_table
from npbert.verify.candidates import to_bfloat16
from npbert.verify.family_bugs import (
    last_linear_left_out,
    padding_kept,
    token_dropout_left_out,
    token_dropout_over_padding,
    trigram_reversed,
)
from npbert.verify.mutations import Case, after_sum, eps, rerun, tables
from npbert.verify.norm_bugs import (
    layer_norm_for_no_norm,
    no_affine,
    norm_where_none,
    other_eps,
    swapped_affine,
    unbiased_variance,
)


@dataclass(frozen=True)
class Bug:
    """One known bug: what the port computed, how to fix it, and its mutants."""

    name: str
    what: str  # "LayerNorm eps {value:g}": said after "matches the reference with"
    fix: str  # "use config.json's layer_norm_eps, {expected:g}"
    mutants: Callable[[Case], Iterator[tuple[object, dict]]]
    expected: Callable[[Case], object] = lambda case: None  # the checkpoint's own value


# --- token types --------------------------------------------------------------------------------


def types_zero(case: Case):
    if case.token_type_ids is not None and case.token_type_ids.any():
        yield None, rerun(case, token_type_ids=np.zeros_like(case.token_type_ids))


def types_one(case: Case):
    types = case.token_type_ids
    if types is not None and case.config.type_vocab_size > 1 and not (types == 1).all():
        yield None, rerun(case, token_type_ids=np.ones_like(types))


def types_left_out(case: Case):
    if case.token_type_ids is not None:
        table = np.zeros_like(case.weights.token_type_embeddings)
        yield None, rerun(case, dataclasses.replace(case.weights, token_type_embeddings=table))


def types_from_elsewhere(case: Case):
    """Token types taken from another input: the attention mask (inputs passed in the wrong
    order), or the first sequence's for every sequence of the batch."""
    types = case.token_type_ids
    if types is None:
        return
    sources = {"the attention mask": case.mask}
    if types.ndim == 2 and len(types) > 1:
        sources["the first sequence's"] = types[:1]
    for name, source in sources.items():
        given = None if source is None else np.broadcast_to(source, types.shape)
        if given is not None and not np.array_equal(given, types):
            yield name, rerun(case, token_type_ids=given.copy())


# --- positions and ids --------------------------------------------------------------------------


def position_offsets(case: Case):
    """Positions offset by k: from 0 in RoBERTa's and MPNet's (which count from padding_idx + 1),
    from 1 in BERT's, one off either way."""
    positions = case.position_ids
    if positions is None:
        return
    start = first_position(case)
    offsets = {-start - 1, -start, -start + 1, start, *range(-4, 5)} - {0}
    counted = None  # RoBERTa's numbered over every token, padding too, as a port's arange does
    if case.config.positions == "padded" and case.mask is not None and not case.mask.all():
        counted = np.arange(case.input_ids.shape[-1]) + start
    for k in sorted(offsets, key=abs):
        yield k, rerun(case, position_ids=positions + k)
        if counted is not None:
            yield k, rerun(case, position_ids=np.broadcast_to(counted + k, positions.shape).copy())


def first_position(case: Case) -> int:
    """Where a real token's positions start: padding_idx + 1 (RoBERTa's), else 0 (2 in
    Nystromformer's)."""
    return case.config.first_position


def padding_counted(case: Case):
    """RoBERTa's positions count real tokens only; a port that numbers every token from
    padding_idx + 1 gives padding (and what follows left padding) other positions."""
    if case.config.positions != "padded" or case.mask is None or case.mask.all():
        return
    length = case.input_ids.shape[-1]
    counted = np.arange(length) + first_position(case)  # (L,)
    yield None, rerun(case, position_ids=np.broadcast_to(counted, case.input_ids.shape).copy())


def sinusoids(case: Case):
    """The Transformer's sines and cosines in place of the checkpoint's learned rows: as the
    paper interleaves them (DistilBERT's sinusoidal table), or in halves, sines first (fairseq's
    and tensor2tensor's)."""
    w = case.weights
    if w.position_embeddings is None or case.config.sinusoidal:
        return
    shape = w.position_embeddings.shape
    for name, table in (("interleaved", sinusoidal_table(*shape)), ("in halves", halves(*shape))):
        tables = dataclasses.replace(w, position_embeddings=table.astype(np.float32))
        yield name, rerun(case, tables)


def halves(num_positions: int, width: int) -> np.ndarray:
    """fairseq's SinusoidalPositionalEmbedding: sin(pos * f_i) then cos(pos * f_i), f_i =
    10000^(-i / (width / 2 - 1)), and a zero column where width is odd. -> (P, width)"""
    half = width // 2
    rates = np.exp(np.arange(half) * -np.log(10000.0) / max(half - 1, 1))  # (width / 2,)
    angles = np.arange(num_positions)[:, None] * rates  # (P, width / 2)
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (P, 2 * (width / 2))
    return np.pad(table, ((0, 0), (0, width % 2)))  # (P, width)


def id_offsets(case: Case):
    for k in (-1, 1, -2, 2):
        yield k, rerun(case, input_ids=case.input_ids + k)


# --- precision ----------------------------------------------------------------------------------

ROUNDINGS = {"float16": lambda a: a.astype(np.float16), "bfloat16": to_bfloat16}


def narrow_tables(case: Case):
    for name, rounding in ROUNDINGS.items():
        yield name, rerun(case, tables(case, rounding))


def narrow_computation(case: Case, rounding: Callable) -> dict | None:
    """The stages of a port computing every step in float16 or bfloat16 (`rounding` to it):
    the tables, the sum, the normalized rows and the output each rounded. NumPy has no
    bfloat16 arithmetic; rounding each step's result is what such kernels give, up to their
    order of additions and accumulators, so this is held to the candidate by its spread, not
    value for value (npbert.verify.diagnosis.precision)."""
    stages = rerun(case, tables(case, rounding))
    if stages is None:
        return None

    def narrow(x: np.ndarray) -> np.ndarray:
        return rounding(x).astype(np.float64)

    if "sum" in stages:
        stages["sum"] = narrow(stages["sum"])
    return after_sum(
        dataclasses.replace(case, reference=stages),
        lambda x: narrow(normalize(x, eps(case))),
        lambda n, g, b: narrow(scale_shift(n, g, b)),
    )


# --- padding rows and family-specific steps -----------------------------------------------------


def padding_zeroed(case: Case):
    """Padding rows zeroed: where the mask says, or else where the ids are the pad token."""
    mask = case.mask
    if mask is None and case.config.pad_token_id is not None:
        mask = case.input_ids != case.config.pad_token_id
    if mask is not None and not mask.all() and not case.config.family.masks_padding:
        stages = dict(case.reference)
        mask = mask[..., None]
        stages |= {key: stages[key] * mask for key in ("embeddings", "projected") if key in stages}
        yield None, stages


def word_scale(case: Case):
    """BigBird's word rows times sqrt(H), left out where rescale_embeddings is true, or
    applied where it is false."""
    if case.config.family.rescale_key is None:
        return
    scale = case.config.word_scale
    other = 1.0 if scale != 1.0 else float(np.sqrt(case.config.hidden_size))
    config = dataclasses.replace(case.config, word_scale=other)
    yield other, rerun(case, dataclasses.replace(case.weights, config=config))


def narrow_output_projected(case: Case):
    """The layer's output rounded to float16 or bfloat16 before the projection, which is
    computed in float32 from it (a mixed-precision port's stored activations)."""
    if "projected" not in case.reference:
        return
    w = case.weights
    for name, rounding in ROUNDINGS.items():
        rounded = rounding(case.reference["embeddings"]).astype(np.float64)
        yield (
            name,
            dict(case.reference)
            | {
                "embeddings": rounded,
                "projected": linear(rounded, w.projection_weight, w.projection_bias),
            },
        )


def projection_left_out(case: Case):
    """The layer's output given as what the encoder receives: the projection E -> H not
    applied (its shape tells it where E != H; an ELECTRA of E = H has none to leave out)."""
    if "projected" in case.reference:
        yield None, dict(case.reference) | {"projected": case.reference["embeddings"]}


CATALOG = (
    Bug(
        "layer_norm_eps",
        "LayerNorm eps {value:g}",
        "use config.json's layer_norm_eps, {expected:g}",
        other_eps,
        eps,
    ),
    Bug(
        "variance_over_h_minus_1",
        "the LayerNorm's variance divided by H - 1",
        "LayerNorm divides by H (the biased variance, torch.var(unbiased=False), np.var)",
        unbiased_variance,
    ),
    Bug(
        "gamma_beta_swapped",
        "LayerNorm's weight and bias swapped",
        "LayerNorm.weight (gamma) scales the normalized rows, LayerNorm.bias (beta) is added",
        swapped_affine,
    ),
    Bug(
        "layer_norm_affine_left_out",
        "the LayerNorm's weight and bias left out",
        "scale by LayerNorm.weight and add LayerNorm.bias after normalizing",
        no_affine,
    ),
    Bug(
        "layer_norm_for_no_norm",
        "a LayerNorm (eps {value:g}) in place of NoNorm",
        "MobileBERT's NoNorm (normalization_type no_norm) is x * weight + bias, no mean or "
        "variance",
        layer_norm_for_no_norm,
    ),
    Bug(
        "layer_norm_where_none",
        "a LayerNorm (eps {value:g}) the layer does not have",
        "{expected}'s layer has no norm: its output is the sum (its encoder layers normalize "
        "their input)",
        norm_where_none,
        lambda case: case.config.model_type,
    ),
    Bug(
        "token_types_all_0",
        "token types all 0",
        "a pair's second text (after the first [SEP]) has token type 1",
        types_zero,
    ),
    Bug(
        "token_types_all_1",
        "token types all 1",
        "a single text's token types are all 0, and a pair's first text's too",
        types_one,
    ),
    Bug(
        "token_types_left_out",
        "no token-type rows added",
        "add token_type_embeddings[token_type_ids] (row 0 for a single text) to the sum",
        types_left_out,
    ),
    Bug(
        "token_types_from_another_input",
        "token types taken from {value}",
        "pass each sequence's own token_type_ids (inputs given in the wrong order?)",
        types_from_elsewhere,
    ),
    Bug(
        "positions_offset",
        "positions offset by {value:+d}",
        "a real token's positions start at {expected}",
        position_offsets,
        first_position,
    ),
    Bug(
        "padding_counted_in_positions",
        "padding counted in the positions",
        "count real tokens only, from padding_idx + 1 = {expected}; padding takes padding_idx "
        "(create_position_ids_from_input_ids)",
        padding_counted,
        first_position,
    ),
    Bug(
        "sinusoidal_positions",
        "the Transformer's fixed sinusoids ({value}) as position rows",
        "this checkpoint's position rows are learned: read position_embeddings from it",
        sinusoids,
    ),
    Bug(
        "ids_offset",
        "token ids offset by {value:+d}",
        "look the tokenizer's ids up as they are (0-based; no offset for special tokens)",
        id_offsets,
    ),
    Bug(
        "tables_narrowed",
        "its tables rounded to {value}",
        "keep the checkpoint's tables in float32",
        narrow_tables,
    ),
    Bug(
        "padding_rows_zeroed",
        "padding rows zeroed",
        "this family's layer does not zero them (attention masks them out later)",
        padding_zeroed,
    ),
    Bug(
        "padding_rows_not_zeroed",
        "padding rows not zeroed",
        "{expected}'s layer multiplies its output by the attention mask",
        padding_kept,
        lambda case: case.config.model_type,
    ),
    Bug(
        "token_dropout_left_out",
        "ESM's token dropout left out",
        "with token_dropout, zero the <mask> rows and scale every row by 0.88 / (1 - the "
        "sequence's share of <mask>)",
        token_dropout_left_out,
    ),
    Bug(
        "token_dropout_over_padding",
        "the share of <mask> tokens counted over the padding too",
        "ESM counts the share over the tokens the attention mask keeps",
        token_dropout_over_padding,
    ),
    Bug(
        "trigram_reversed",
        "the trigram as [previous, this, next]",
        "MobileBERT's trigram is [next, this, previous]: the next token's row comes first",
        trigram_reversed,
    ),
    Bug(
        "last_linear_left_out",
        "the Linear FNet's layer ends with left out",
        "apply embeddings.projection (H -> H, with bias) after the LayerNorm",
        last_linear_left_out,
    ),
    Bug(
        "word_scale",
        "the word rows scaled by {value:g}",
        "BigBird scales them by sqrt(H) exactly when rescale_embeddings is true: {expected:g}",
        word_scale,
        lambda case: case.config.word_scale,
    ),
    Bug(
        "output_narrowed_before_projection",
        "the layer's output rounded to {value} before the projection",
        "keep the layer's output in float32 for the projection",
        narrow_output_projected,
    ),
    Bug(
        "projection_left_out",
        "the projection left out",
        "the encoder receives the output projected E -> H (embeddings_project / "
        "embedding_hidden_mapping_in)",
        projection_left_out,
    ),
)
