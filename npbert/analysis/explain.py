"""`npbert explain`: a well-known walk-through of BERT's embedding layer as a command.

It prints the family's formula, the tokens with their ids, token types and positions (and
the mask, where the layer uses it), then every stage that npbert.embed_stages computes, in
order, with what it is, a long text's middle rows elided but where sentence B or padding
begins; and checks the result against npbert.embed, the fast path users call. The stages are
the specification's; this module formats them and measures two distances: the fast path's
from them, and the stored position table's from the sinusoids.
"""

import numpy as np

from npbert.analysis.positions import sinusoidal_table
from npbert.analysis.shared import Walked, shared_lines
from npbert.errors import InputError
from npbert.layer.inputs import prepare_inputs
from npbert.layer.weights import EmbeddingWeights
from npbert.model import embed, embed_stages
from npbert.verify.tolerances import default_atol

SHOWN = 3  # values shown at each end of a row, as torch prints tensors


def format_row(row: np.ndarray) -> str:
    """[ 0.0136 -0.0265 -0.0235 ...  0.0087  0.0071  0.0151]"""
    values = (*row[:SHOWN], None, *row[-SHOWN:]) if row.size > 2 * SHOWN else tuple(row)
    return "[" + " ".join("   ..." if v is None else _number(v) for v in values) + "]"


def _number(value) -> str:
    """Four decimals, as the walk-throughs print; past 1e4 (a broken table's), in e-notation,
    where a float32 of 3e38 took 45 digits."""
    return f"{value:7.4f}" if not abs(value) >= 1e4 else f"{value:.3e}"


SHOWN_TOKENS = 12  # rows of a long text shown, half from each end, and where inputs change


def _kept(count: int, marked: set) -> list:
    """The tokens shown of `count`: every one of a short text; of a longer one, the first and
    last SHOWN_TOKENS / 2 and the `marked` ones, with None in place of two or more hidden
    between them (a "..." in place of one row would hide it for nothing)."""
    if count <= SHOWN_TOKENS + 1:
        return list(range(count))
    half = SHOWN_TOKENS // 2
    rows, last = [], -1
    for i in sorted({*range(half), *marked, *range(count - half, count)}):
        if i - last > 2:
            rows.append(None)
        elif i - last == 2:
            rows.append(i - 1)
        rows.append(i)
        last = i
    return rows


def _changes(*columns) -> set:
    """The rows on either side of each place where one of the (L,) columns (or None) changes
    value: where sentence B begins (token types) or padding does (a mask)."""
    rows = set()
    for values in filter(lambda v: v is not None, columns):
        for i in np.flatnonzero(np.diff(values)):
            rows |= {int(i), int(i) + 1}
    return rows


def _rows(title: str, labels: list[str], matrix: np.ndarray | None, shown: list) -> list[str]:
    """A title, then one labelled row per token shown (_kept), or the title alone for a step
    with no array of its own."""
    if matrix is None:
        return [title]
    width = max(len(label) for label in labels)
    lines = [title]
    for i in shown:
        lines.append("   ..." if i is None else f"   {labels[i]:<{width}}  {format_row(matrix[i])}")
    return lines


# float32 holds a sinusoid to 6e-8: a stored table within this of the formula is its sinusoids.
SINUSOID_MATCH = 1e-6


def _table_text(table: np.ndarray, sinusoidal: bool) -> str:
    """What the stored position table (P, E) holds, beside what the config calls it:
    transformers adds the table as stored, whatever it holds."""
    gap = float(np.abs(table - sinusoidal_table(*table.shape)).max())
    if sinusoidal and gap <= SINUSOID_MATCH:
        return (
            "Fixed sinusoids, as in the original Transformer, stored as a table "
            f"(sinusoidal_pos_embds; the stored table is the sinusoids to {gap:.1e})."
        )
    if sinusoidal:
        return (
            "sinusoidal_pos_embds calls them fixed sinusoids, but the stored table differs from "
            f"the sinusoids by up to {gap:.3g}; the layer adds it as stored, as transformers does."
        )
    if gap <= SINUSOID_MATCH:
        return (
            "A learned parameter like the token table, but this checkpoint's table holds the "
            f"fixed sinusoids of the original Transformer (to {gap:.1e})."
        )
    return (
        "Learned in pre-training like the token table, not the fixed sinusoids of the original "
        "Transformer."
    )


def _positions_text(weights: EmbeddingWeights, position_ids: np.ndarray) -> str:
    config = weights.config
    shape = weights.position_embeddings.shape
    learned = _table_text(weights.position_embeddings, config.sinusoidal)
    if config.positions == "padded":
        return (
            f"Position embeddings: {_row_range(position_ids)} of "
            f"position_embeddings {shape}. {config.model_type} numbers the tokens that are not "
            f"padding from padding_idx + 1 = {config.padding_idx + 1}, and gives padding row "
            f"padding_idx = {config.padding_idx}. {learned}"
        )
    offset = (
        f" {config.model_type} numbers tokens from {config.position_offset}: its model never "
        f"reads the first {config.position_offset} rows."
        if config.position_offset
        else ""
    )
    return (
        f"Position embeddings: {_row_range(position_ids)} of position_embeddings {shape}."
        f"{offset} {learned}"
    )


def _row_range(ids: np.ndarray) -> str:
    """The rows ids look up: "row 0" for one, "rows 0..6" for a run of three or more, "rows 0,
    5, 63" for a few others, "12 rows from 0 to 63" for more."""
    rows = np.unique(ids)
    first, last = rows[0], rows[-1]
    if len(rows) == 1:
        return f"row {first}"
    if len(rows) > 2 and len(rows) == last - first + 1:
        return f"rows {first}..{last}"
    if len(rows) <= 8:
        return "rows " + ", ".join(map(str, rows))
    return f"{len(rows)} rows from {first} to {last}"


def stage_titles(weights: EmbeddingWeights, stages: dict, token_type_ids, position_ids) -> dict:
    """What each stage is, for this checkpoint."""
    config = weights.config
    hidden = stages["embeddings"].shape[-1]
    titles = {
        "word": f"Token embeddings: rows of word_embeddings {weights.word_embeddings.shape}, a "
        "learned table. Context-free: a token gets the same row in every sentence.",
        "sum": f"Sum: {_sum_text(config, stages)}",
        "normalized": f"LayerNorm, normalization over the {hidden} values of each token: "
        f"(x - mean) / sqrt(var + {config.layer_norm_eps:g})",
        "embeddings": "LayerNorm, learned scale and shift: * gamma"
        + (" + beta" if weights.layer_norm_bias is not None else " (no beta in this model)")
        + _masked(config),
    }
    titles |= _own_steps(weights, stages)
    if "token_type" in stages:
        rows = _row_range(np.asarray(token_type_ids))
        titles["token_type"] = (
            f"Segment embeddings: {rows} of token_type_embeddings "
            f"{weights.token_type_embeddings.shape}. Learned vectors, one per token type, not "
            "vectors of zeros and ones."
        )
    if "position" in stages:
        titles["position"] = _positions_text(weights, np.asarray(position_ids))
    size = f"from width {config.embedding_size} to the hidden size {config.hidden_size}"
    titles["embed_proj"] = f"Projection {size}, before the LayerNorm (embed_proj, no bias)"
    titles["projected"] = (
        f"Projection {size}, after the layer (a learned Linear): what the first encoder "
        "layer receives"
    )
    return titles


def _masked(config) -> str:
    return ", then times attention_mask" if config.family.masks_padding else ""


def _sum_text(config, stages: dict) -> str:
    """What the sum adds, in the family's order: "token + segment + position"."""
    terms = {"word": "token", "token_type": "segment", "position": "position"}
    summed = " + ".join(terms[name] for name in stages if name in terms)
    if config.word_scale != 1.0:
        summed = summed.replace("token", f"token * sqrt({config.hidden_size})", 1)
    if "embedding_transformation" in stages:  # MobileBERT's Linear of the word rows
        summed = summed.replace("token", "Linear", 1)
    if config.mask_token_id is not None:  # ESM's token dropout
        summed = summed.replace("token", "token dropout (<mask> rows zeroed, rows scaled)", 1)
    return summed


def _own_steps(weights: EmbeddingWeights, stages: dict) -> dict:
    """The titles of the steps some families add or change: MobileBERT's trigram, its Linear
    and NoNorm, FNet's Linear last, the output of a layer without a norm."""
    config = weights.config
    titles = {}
    if config.norm == "no_norm":  # MobileBERT's
        titles["embeddings"] = "NoNorm, a learned scale and shift, no statistics: * gamma + beta"
    if config.trigram:
        titles["trigram"] = (
            "Trigram: each token's row beside the next and the previous token's, "
            "[next, this, previous], zeros past the ends"
        )
    if "embedding_transformation" in stages:
        shape = weights.projection_weight.shape
        titles["embedding_transformation"] = f"Linear {shape} with bias (embedding_transformation)"
    if "layer_norm" in stages:  # FNet: its layer ends with a Linear
        titles["layer_norm"] = "LayerNorm, learned scale and shift: * gamma + beta"
        shape = weights.projection_weight.shape
        titles["embeddings"] = f"Projection {shape} with bias, the layer's last step (FNet's)"
    if config.norm is None:  # Megatron-BERT: its encoder layers normalize their input
        titles["embeddings"] = f"Output: the sum, not normalized in this layer{_masked(config)}"
    return titles


def _widths(config) -> str:
    """The tables' width, and the output's where a projection makes it another."""
    if config.projection is None or config.embedding_size == config.hidden_size:
        return str(config.embedding_size)
    return f"{config.embedding_size}, projected to {config.hidden_size}"


DROPOUT = "Dropout: the identity at inference, so this is the layer's output."
DROPOUT_INSIDE = "Dropout, before the LayerNorm here: the identity at inference."


def explain(
    weights: EmbeddingWeights,
    tokens: list[str] | None,
    input_ids,
    token_type_ids,
    attention_mask,
    position_ids=None,
) -> tuple[str, bool]:
    """(the walk-through, whether embed() equals it) for one tokenized text: input_ids,
    token_type_ids (as the tokenizer gave them), attention_mask and position_ids (None: the
    family's), (L,) int each. tokens None: ids alone, from no tokenizer; rows are labelled
    with their ids."""
    text, equal, _ = walk(weights, tokens, input_ids, token_type_ids, attention_mask, position_ids)
    return text, equal


def walk(weights, tokens, input_ids, token_type_ids, attention_mask, position_ids) -> tuple:
    """explain's (text, equal), and the text as the layer took it (Walked: its inputs with
    the family's defaults, its stages), for what several texts share (explain_texts)."""
    config = weights.config
    types = token_type_ids if config.type_vocab_size else None
    args = (weights, input_ids, types, position_ids)
    kwargs = {"attention_mask": attention_mask, "project": True}
    used = prepare_inputs(config, *args[1:], attention_mask)  # with the defaults
    check_one_text(tokens, used.input_ids)
    stages = embed_stages(*args, **kwargs)
    input_ids, types, positions = used.input_ids, used.token_type_ids, used.position_ids
    mask = used.attention_mask if config.family.masks_padding else None  # DeBERTa's zeroes rows
    inputs = dict(input_id=input_ids, token_type_id=types, position_id=positions)
    inputs |= dict(attention_mask=mask)
    shown = _kept(len(input_ids), _changes(types, used.attention_mask))
    final = stages.get("projected", stages["embeddings"])
    diff, bad, bound = _distance(final, embed(*args, **kwargs))
    lines = _walk_lines(weights, tokens, inputs, stages, shown)
    every = None if positions is None else np.broadcast_to(positions, input_ids.shape)  # (L,)
    walked = Walked(tokens, input_ids, types, every, stages)
    return "\n".join([*lines, "", *_check(diff, bad, bound)]), diff <= bound, walked


def _walk_lines(weights, tokens, inputs: dict, stages: dict, shown: list) -> list[str]:
    """The walk-through's lines: the formula, the ids' table, then a titled step a stage."""
    config, input_ids = weights.config, inputs["input_id"]
    labels = [f"{i:>3} {token}" for i, token in enumerate(tokens or input_ids)]
    titles = stage_titles(weights, stages, inputs["token_type_id"], inputs["position_id"])
    lines = [
        f"{config.model_type}'s embedding layer, step by step: {len(input_ids)} tokens, width "
        f"{_widths(config)}",
        f"   {config.formula}",
        "",
        "1. Tokens and their ids" if tokens else "1. The ids (given without their tokens)",
        *_id_table(tokens, inputs, shown),
    ]
    for step, (title, matrix) in enumerate(_steps(config, stages, titles), start=2):
        lines += ["", *_rows(f"{step}. {title}", labels, matrix, shown)]
    return lines


def _steps(config, stages: dict, titles: dict) -> list[tuple[str, np.ndarray | None]]:
    """(title, rows or None): the stages, and dropout where the module applies it."""
    steps = []
    for name, matrix in stages.items():
        steps.append((titles[name], matrix))
        if name == config.family.dropout_after:
            steps.append((DROPOUT if name == "embeddings" else DROPOUT_INSIDE, None))
    return steps


def _check(diff: float, bad: np.ndarray, bound: float) -> list[str]:
    """The lines that compare the fast path with the steps."""
    lines = [
        f"Check: npbert.embed(), the fast path, against these steps: max |diff| = {diff:.3g} "
        + (f"(equal within {bound:.3g})" if diff <= bound else "(MISMATCH)")
    ]
    if bad.any():
        lines.append(
            f"Note: {int(bad.sum())} output values are NaN or infinite, in both (NaN and Inf "
            "are compared by place): the checkpoint's weights hold NaN or Inf, or values too "
            "large (npbert inspect counts them)."
        )
    return lines


def _distance(final: np.ndarray, embedded: np.ndarray) -> tuple[float, np.ndarray, float]:
    """(max |final - embedded|, where final is NaN or Inf, the bound it is held to) for the
    step-by-step output and embed()'s, (L, E) each; inf where they are not finite alike."""
    bad = ~np.isfinite(final)  # NaN or Inf from the weights: compared as equal where both are
    diff = float(np.abs(final[~bad] - embedded[~bad]).max(initial=0))  # inf - inf: not here
    diff = diff if np.array_equal(bad, ~np.isfinite(embedded)) else np.inf
    # embed() is the fast path, which rounds in another order (within 2e-6): held to compare's
    # default tolerance against the step-by-step output
    return diff, bad, default_atol(np.where(bad, 0, final))


def _id_table(tokens: list[str] | None, columns: dict, shown: list) -> list[str]:
    """The tokens (where given) with their ids and the other inputs the layer takes (columns:
    {name: (L,) ints}, None where it takes none), one line a token shown (_kept) under a
    header."""
    columns = {name: values for name, values in columns.items() if values is not None}
    width = {name: max(13, len(name)) for name in columns}
    token = f"{'token':<14} " if tokens else ""
    table = [f"   {'i':>3} {token}" + "  ".join(f"{n:>{width[n]}}" for n in columns)]
    for i in shown:
        if i is None:
            table.append("   ...")
            continue
        cells = (f"{int(v[i]):>{width[n]}}" for n, v in columns.items())
        table.append(f"   {i:>3} " + (f"{tokens[i]:<14} " if tokens else "") + "  ".join(cells))
    return table


def check_one_text(tokens: list[str] | None, input_ids: np.ndarray) -> None:
    """InputError unless input_ids is one text, (L,), and tokens (unless None) its L tokens
    as strings."""
    if input_ids.ndim != 1:
        raise InputError(f"explain takes one text: input_ids (L,), not {input_ids.shape}")
    if tokens is None:
        return
    if not isinstance(tokens, list | tuple) or not all(isinstance(t, str) for t in tokens):
        raise InputError("explain takes the text's tokens as a list of strings")
    if len(tokens) != len(input_ids):
        raise InputError(f"explain takes a token per id: {len(tokens)} for {len(input_ids)} ids")


def explain_texts(weights: EmbeddingWeights, texts: list[tuple]) -> tuple[str, bool]:
    """(the walk-through of each text in turn, then what they share; whether embed() equals
    the steps for every one). texts: (tokens, input_ids, token_type_ids, attention_mask,
    position_ids) each, as explain takes them."""
    if not texts:
        raise InputError("explain_texts: no text to walk through")
    parts, equal, walked = [], True, []
    for number, inputs in enumerate(texts, start=1):
        text, same, one = walk(weights, *inputs)
        parts.append(text if len(texts) == 1 else f"Text {number}\n\n{text}")
        equal &= same
        walked.append(one)
    rule = "\n\n" + "-" * 72 + "\n\n"
    return "\n".join([rule.join(parts), *shared_lines(weights.config, walked)]), equal
