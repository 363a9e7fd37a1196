"""How close a stage must be to npbert's float64 reference: the default atol, a product's
(what float32 products of its length and size can differ by), and the measures reported
(float32 ULPs, cosines).
"""

import math

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import indexed, shown

# Every stage name a family may have (npbert.layer.embedding), for reading a candidate's arrays.
STAGES = (
    "word",
    "trigram",
    "embedding_transformation",
    "token_type",
    "position",
    "sum",
    "embed_proj",
    "normalized",
    "layer_norm",
    "embeddings",
    "projected",
)


# A candidate's output: the layer's, or its projection to H (what the first encoder layer
# receives, for ALBERT, ELECTRA and RoFormer); it gives one or both.
OUTPUTS = ("embeddings", "projected")


# A .npy's one array, or a JSON file's one list: an output, named by its shape (named_output).
OUTPUT = "output"


# The inputs a candidate may give beside its stages (what npbert embed --out writes): checked
# against the reference's before any stage, as tokenizing is the step before the lookups.
INPUTS = ("input_ids", "token_type_ids", "position_ids", "attention_mask")


# What npbert embed --out also writes: neither an input nor a stage, left out.
METADATA = "metadata"


DEFAULT_ATOL = 1e-5  # what Hugging Face's and ONNX export checks use


FLOAT64_ATOL = 1e-12  # the least atol for an implementation computing in float64


DEFAULT_RTOL = 0.0


# Where a stage's values are large, DEFAULT_ATOL is less than float32 can resolve (one step is
# 1.5e-5 from 128 up): no float32 result could pass. The default then allows this many float32
# steps of the stage's largest value (npbert's fast path stays within 3: tests/test_fast.py).
STEPS = 4


def default_atol(reference: np.ndarray, dtype=np.float32, base: float = DEFAULT_ATOL) -> float:
    """The atol a stage is held to unless one is given: `base`, or STEPS steps of `dtype` at
    the reference's largest |value|, whichever is more (1e-5 for outputs below 32)."""
    largest = dtype(np.abs(reference).max(initial=0))
    return max(base, STEPS * float(np.spacing(largest)))


# The stages that are matrix products y = x @ weight.T (+ bias): {stage: (the stage or stages
# that are x, first found; the weight's and the bias's names in EmbeddingWeights)}.
PRODUCTS = {
    "embed_proj": (("sum", "word"), "projection_weight", None),  # DeBERTa's, inside the layer
    "projected": (("embeddings",), "projection_weight", "projection_bias"),  # after it
    "embeddings": (("layer_norm",), "projection_weight", "projection_bias"),  # FNet's, last
    # MobileBERT's, of its word rows (or their trigram) before the other rows are added
    "embedding_transformation": (("trigram", "word"), "projection_weight", "projection_bias"),
}


def product_atol(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, x_atol: float, dtype=np.float32
) -> float:
    """The atol of a product stage y = x @ weight.T + bias: what correct arithmetic in `dtype`
    can put between a port's y and the reference's. x (..., E) the reference's input to the
    product, weight (H, E), bias (H,) or None, x_atol what the input stage is held to.

    A port multiplies its own x, within x_atol of the reference's, and sums the E products
    and the bias in its dtype in an order of its own, which errs by at most gamma(E + 1) =
    (E + 1) u / (1 - (E + 1) u), u = 2^-24 in float32, times the sum of the terms' sizes (Higham,
    Accuracy and Stability of Numerical Algorithms, eq. 3.5). Value by value,

        |y' - y| <= x_atol |w|_1 + gamma(E + 1) (|x| @ |w|.T + x_atol |w|_1 + |b|),

    |w|_1 the sum of a row's |weights|: this atol is the largest over the stage."""
    width = weight.shape[1]
    magnitudes = np.abs(weight.astype(np.float64))  # (H, E)
    moved = x_atol * magnitudes.sum(axis=1)  # (H,) what the input's tolerance moves y by
    sizes = np.abs(x.reshape(-1, width)) @ magnitudes.T + moved  # (n, H)
    if bias is not None:
        sizes += np.abs(bias)
    terms = (width + 1) * float(np.finfo(dtype).eps) / 2
    return float(moved.max(initial=0) + terms / (1 - terms) * sizes.max(initial=0))


def stage_atols(
    reference64: dict, weights=None, dtype=np.float32, base: float = DEFAULT_ATOL
) -> dict[str, float]:
    """The atol each stage is held to unless one is given, for a port computing in `dtype`:
    default_atol, and for a product stage (given the weights) product_atol where that is more."""
    atols = {name: default_atol(values, dtype, base) for name, values in reference64.items()}
    for name, (inputs, weight, bias) in PRODUCTS.items():
        x = next((stage for stage in inputs if stage in reference64), None)
        if weights is None or name not in reference64 or x is None:  # (a product elsewhere)
            continue
        w, b = getattr(weights, weight), bias and getattr(weights, bias)
        atols[name] = max(atols[name], product_atol(reference64[x], w, b, atols[x], dtype))
    return atols


def _errors(candidate: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, float]:
    """(|candidate - expected| with NaN as infinitely wrong, the max error relative to
    |expected|)."""
    error = np.abs(candidate - expected)
    error[np.isnan(error)] = np.inf
    scale = np.abs(expected)
    relative = np.divide(error, scale, out=np.full_like(error, np.inf), where=scale > 0)
    relative[error == 0] = 0.0
    return error, float(relative.max())


def _within(error: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> bool:
    """Every error within atol + rtol |expected|; an infinite error (a NaN or Inf where the
    reference is finite) never is, however large the tolerance (rtol |expected| may overflow)."""
    with np.errstate(over="ignore"):
        return bool((np.isfinite(error) & (error <= atol + rtol * np.abs(expected))).all())


def ulps(candidate: np.ndarray, reference64: np.ndarray) -> np.ndarray:
    """|candidate - reference| in units of the float32 spacing at the reference value."""
    spacing = np.spacing(np.abs(reference64).astype(np.float32)).astype(np.float64)
    return np.abs(candidate - reference64) / spacing


def cosines(candidate: np.ndarray, reference64: np.ndarray) -> np.ndarray:
    """Per-token cosine similarity over the hidden axis: (..., L, H) -> (..., L). Two zero
    rows (DeBERTa's padding) agree: 1; a zero row against another: 0."""
    dot = (candidate * reference64).sum(-1)
    a, b = np.linalg.norm(candidate, axis=-1), np.linalg.norm(reference64, axis=-1)
    norms = a * b
    return np.where((a == 0) & (b == 0), 1.0, dot / np.where(norms > 0, norms, 1.0))


def check_finite(stages: dict[str, np.ndarray], what: str) -> None:
    """InputError at the first NaN or infinity in a reference's stages, in the order computed:
    the weights hold one (or values that overflow), and nothing can be checked against it."""
    for name, values in stages.items():
        bad = np.argwhere(~np.isfinite(values))
        if bad.size:
            at = tuple(bad[0])
            raise InputError(
                f"{what} is not finite: {indexed(name, at)} = {values[at]}; the checkpoint's "
                "weights hold NaN or Inf, or values too large (npbert inspect counts them)"
            )


def check_tolerance(name: str, value) -> float:
    """atol or rtol: a finite number of at least 0 (a bool is not one), or InputError."""
    number = isinstance(value, int | float | np.integer | np.floating)
    try:
        tolerance = float(value) if number and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int past float's range (np.isfinite raised TypeError on it)
        tolerance = math.inf
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise InputError(f"{name} must be a finite number of at least 0, got {shown(value)}")
    return tolerance
