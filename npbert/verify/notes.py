"""What a failing stage's shape or values suggest: the notes under a stage of the report."""

import math

import numpy as np

from npbert.verify.candidates import _align, _narrow, narrow_format
from npbert.verify.result import StageResult
from npbert.verify.tolerances import FLOAT64_ATOL, _errors, _within, default_atol


def product_note(atol: float) -> str:
    return (
        f"a matrix product, held to atol {atol:.3g}: what correct float32 products of its "
        "length and size can differ by"
    )


FLOAT64_HELD = (
    "float64 values, held to float32's tolerance: one computing in float64 comes far closer "
    f"(an atol of {FLOAT64_ATOL:g} holds it to that)"
)


# Hints on a stage's line of the report, where its shape or its values say more than its
# errors do (stage_notes).
PROJECTED_AS_EMBEDDINGS = (
    "this is the shape of 'projected', the projection to the hidden size: give it under "
    "that name (an .npz or .safetensors array)"
)


EMBEDDINGS_AS_PROJECTED = (
    "this is the shape of 'embeddings', the layer's output before the projection to the "
    "hidden size: is the projection left out?"
)


BEFORE_PROJECTION = (
    "checked as the layer's output, before the projection to the hidden size that follows "
    "it ('projected', what the first encoder layer receives)"
)


UNPROJECTED = (
    "this is the width of the word rows, before the projection inside the layer to the hidden "
    "size ('embed_proj', DeBERTa's): is the projection left out?"
)


PADDING_ONLY = (
    "every value out of tolerance is in a padding row (attention_mask 0); the real tokens "
    "agree. npbert embeds padding rows as the family's layer does"
)


PADDED_FURTHER = (
    "{} tokens a sequence where the reference has {}: padded to a fixed length (as "
    "tokenizer.json's padding may say)? npbert pads a batch only to its longest text; give "
    "the reference the padded ids and their attention mask to compare all"
)


WHOLE_NUMBERS = (
    "every value is a whole number, as token ids are, where this stage holds the layer's "
    "real-valued rows: ids given as the candidate? (the ids are the reference's input)"
)


ZEROED_PADDING = (
    "the candidate's padding rows are zeros, and the reference's are not: of the families, "
    "DeBERTa's layer alone zeroes padding, and only given the mask (from Python, references "
    "made without it: embed_stages(..., attention_mask=mask))"
)


SWAPPED = (
    "this is the expected shape with its first two axes swapped: (L, B, ...) where the "
    "reference is (B, L, ...), batch first"
)


PER_SEQUENCE = (
    "the reference's position rows differ between sequences (positions derived from each "
    "sequence's padding): give them per sequence"
)


NO_SEQUENCES = (
    f"{PER_SEQUENCE}; and these rows are no sequence's, so the positions are wrong too "
    "(RoBERTa's count from padding_idx + 1)"
)


def _some_sequences(candidate: dict, reference64: dict) -> bool:
    """Whether a candidate's shared position rows, (L, E), are some sequence's rows of the
    reference, (B, L, E), within the default tolerance."""
    rows, reference = candidate["position"], reference64["position"]
    atol = default_atol(reference) + _narrow(rows, reference)[1]  # rows in float16, say
    return any(_within(_errors(rows, of)[0], of, atol, 0.0) for of in reference)


def stage_notes(
    candidate: dict, reference64: dict, stages: list, bare: bool, batch, mask=None
) -> dict:
    """{stage: [note, ...]} for the report. bare: the candidate's output came unnamed (a .npy),
    and was taken as the layer's output or its projection by its shape; batch: batch_size;
    mask: compare's attention_mask. A candidate's huge values (1e308, a port's uninitialized
    memory) overflow in these guesses: no note, and no warning."""
    notes = {}
    for stage in stages:
        with np.errstate(all="ignore"):
            said = [
                note for note in _notes(stage, candidate, reference64, bare, batch, mask) if note
            ]
        if said:
            notes[stage.name] = said
    return notes


def _notes(stage: StageResult, candidate: dict, reference64: dict, bare: bool, batch, mask):
    """stage_notes' guesses for one stage, None where one has nothing to say."""
    yield from _shape_notes(stage, candidate, reference64, bare)
    if stage.ok:
        return
    yield whole_numbers(candidate[stage.name])
    if stage.shape_ok:
        values = candidate[stage.name]
        expected, _ = _align(stage.name, values, reference64[stage.name], batch)
        stored = _narrow(values, expected)  # (float16 or bfloat16, its rounding's cost) or not
        yield not_finite(values)
        yield narrow_format(*stored)
        yield scaled(stage, values, expected, stored[1])
        yield zeroed_padding(stage, values, expected, mask)
        yield swapped_values(stage, values, expected, stored[1])
        yield other_stage(stage, values, reference64, batch)


# Ids are whole numbers of at most this (float32 holds every whole number up to it); larger
# values, whole as every float is from 2**24 up, are no evidence of ids (a port's 1e308s).
LARGEST_ID = 2**24


def whole_numbers(values: np.ndarray) -> str | None:
    """A note where a failing stage's values are whole numbers, some past 1 and none past
    LARGEST_ID: token ids, say, given where the layer's output belongs (no stage of a real
    layer is whole numbers, but sinusoidal position rows at position 0 are 0s and 1s)."""
    if values.size == 0 or not np.isfinite(values).all():
        return None
    if not 1 < max(abs(float(values.min())), abs(float(values.max()))) <= LARGEST_ID:
        return None
    if values.dtype.kind in "iu":
        return WHOLE_NUMBERS
    sample = values.flat[:4096]  # a real-valued stage shows it here, without a whole copy
    whole = np.array_equal(sample, np.round(sample)) and np.array_equal(values, np.round(values))
    return WHOLE_NUMBERS if whole else None


def scaled(stage: StageResult, values: np.ndarray, expected: np.ndarray, stored: float):
    """A note where a failing stage is the reference times one factor: values / factor within
    the stage's tolerance of the reference (a scale applied or left out). The factor is the
    least-squares fit, which the largest values decide (a float32 stage's values near 0 are
    far off in relative terms), said in the fewest digits that still fit. stored: what
    rounding the reference to the values' float16 or bfloat16 costs (_narrow), or 0. For
    'word', sqrt(E) is the scale BigBird applies in its sum, while npbert's 'word' holds the
    rows as stored."""
    wide, norm = expected.astype(np.float64), float(np.vdot(expected, expected))
    if norm == 0 or not np.isfinite(values).all():
        return None
    fitted = float(np.vdot(values.astype(np.float64), wide)) / norm
    # rounding factor * reference to a narrow format costs about as much as rounding the
    # reference, within a factor of 2 (another binade)
    atol = stage.atol + 2 * stored
    digits = (float(f"{fitted:.{n}g}") for n in range(1, 8))
    factor = next((d for d in digits if _fits(values, d, wide, atol)), None)
    if factor in (None, 0, 1):
        return None
    note = f"every value is {repr(factor).removesuffix('.0')} times the reference's"  # 10, 1e+30
    width = expected.shape[-1]
    if stage.name == "word" and _fits(values, math.sqrt(width), wide, atol):
        note += (
            f", sqrt({width}): the scale BigBird gives its word rows in the sum; "
            "npbert's 'word' stage holds them as stored"
        )
    return note


def _fits(values: np.ndarray, factor: float, expected: np.ndarray, atol: float) -> bool:
    """Whether values / factor is within atol of expected."""
    return factor != 0 and _within(_errors(values / factor, expected)[0], expected, atol, 0.0)


def other_token_types(rows: np.ndarray, table: np.ndarray | None) -> bool:
    """Whether every row of a candidate's token_type stage, (..., E), is a row of the table
    (T, E), and not all of them row 0: the rows of token types other than all 0 (a pair's)."""
    if table is None or rows.size == 0 or rows.shape[-1:] != table.shape[-1:]:
        return False
    flat = rows.reshape(-1, rows.shape[-1]).astype(np.float64)  # (n, E)
    with np.errstate(all="ignore"):  # bfloat16's rounding allowed for: 2**-8 of a value
        close = np.stack(
            [(np.abs(flat - row) <= 1e-5 + 2**-8 * np.abs(row)).all(-1) for row in table]
        )
    return bool(close.any(axis=0).all() and not close[0].all())  # (T, n)


SWAPPED_VALUES = (
    "these are the reference's values with the batch and sequence axes swapped, within "
    "tolerance: (L, B, ...) where the reference is (B, L, ...), batch first (B = L here)"
)


def swapped_values(stage: StageResult, values: np.ndarray, expected: np.ndarray, stored: float):
    """A note where a failing (B, B, E) stage is the reference with its first two axes
    swapped: where B = L the shape cannot tell (_swapped does where they differ). stored: as
    scaled takes it (swapping the axes moves values, not what rounding them costs)."""
    if values.ndim != 3 or values.shape[0] != values.shape[1]:
        return None
    swapped = expected.swapaxes(0, 1)  # (L, B, ...)
    error, _ = _errors(values, swapped)
    return SWAPPED_VALUES if _within(error, swapped, stage.atol + stored, 0.0) else None


def zeroed_padding(stage: StageResult, values, expected, mask) -> str | None:
    """A note where a stage wrong only in padding rows has zeros there and the reference has
    not: a port that zeroes padding where the family does not, or DeBERTa references made
    without the mask."""
    if not stage.padding_only:
        return None
    padding = np.asarray(mask) == 0  # (B, L)
    if (values[padding] == 0).all() and (expected[padding] != 0).any():
        return ZEROED_PADDING
    return None


def other_stage(stage: StageResult, values: np.ndarray, reference64: dict, batch) -> str | None:
    """A note where a failing stage is within its tolerance of another stage of the
    reference: the step between the two left out ('normalized' given as the output: gamma and
    beta not applied), or a stage saved under another's name."""
    for name, reference in reference64.items():
        expected, _ = _align(name, values, reference, batch)
        if name == stage.name or expected is None:
            continue
        error, _ = _errors(values, expected)
        if _within(error, expected, stage.atol, 0.0):
            return f"it is the reference's '{name}' stage, within tolerance"
    return None


def not_finite(values: np.ndarray) -> str | None:
    """How many of a candidate's values are NaN or infinite, and where the first is: its
    max |diff| and cosine say only inf."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    count = int(bad.sum())
    return (
        f"{count} of the candidate's values {'is' if count == 1 else 'are'} NaN or infinite, "
        f"the first at {first}: {values[first]}"
    )


def _shape_notes(stage: StageResult, candidate: dict, reference64: dict, bare: bool):
    """What a stage's shape says: an output that fits the other output, one taken as the
    layer's where a projection follows, position rows shared where the reference's differ."""
    if stage.name == "embeddings" and _fits_other(
        "embeddings", "projected", candidate, reference64
    ):
        yield PROJECTED_AS_EMBEDDINGS
    elif stage.name == "embeddings" and bare and stage.shape_ok and "projected" in reference64:
        yield BEFORE_PROJECTION
    if stage.name == "projected" and _fits_other("projected", "embeddings", candidate, reference64):
        yield EMBEDDINGS_AS_PROJECTED
    if stage.name == "embeddings" and _unprojected(stage, candidate, reference64):
        yield UNPROJECTED
    if stage.padding_only:
        yield PADDING_ONLY
    if stage.name == "position" and not stage.shape_ok:
        shape, expected = stage.shapes  # (L, E) against (B, L, E)
        if len(shape) == 2 and len(expected) == 3 and shape == expected[1:]:
            yield PER_SEQUENCE if _some_sequences(candidate, reference64) else NO_SEQUENCES
    if not stage.shape_ok and _swapped(*stage.shapes):
        yield SWAPPED
    if not stage.shape_ok:
        shape, expected = stage.shapes  # (B, L, E) or (B, L) against the same, L longer
        others_agree = shape[:-2] + shape[-1:] == expected[:-2] + expected[-1:]
        if len(shape) == len(expected) >= 2 and shape[-2] > expected[-2] and others_agree:
            yield PADDED_FURTHER.format(shape[-2], expected[-2])


def _swapped(shape: tuple, expected: tuple) -> bool:
    """Whether shape is expected, (B, L, E), with B and L swapped, (L, B, E)."""
    return len(shape) == len(expected) == 3 and shape == (expected[1], expected[0], expected[2])


def _unprojected(stage: StageResult, candidate: dict, reference64: dict) -> bool:
    """Whether a DeBERTa output fails by shape where it has the word rows' width, E, not H."""
    if stage.shape_ok or "embed_proj" not in reference64:
        return False
    return _align("embeddings", candidate["embeddings"], reference64["word"])[0] is not None


def _fits_other(name: str, other: str, candidate: dict, reference64: dict) -> bool:
    """Whether the candidate's `name` fails by shape where it would fit `other` (a .npy of
    what the first encoder layer receives, for ALBERT, say, or the reverse)."""
    if other not in reference64 or other in candidate or name not in candidate:
        return False
    return (
        _align(name, candidate[name], reference64[name])[0] is None
        and _align(other, candidate[name], reference64[other])[0] is not None
    )
