"""Checking another implementation's embeddings against npbert, stage by stage.

The reference is npbert in float64 (every step in float64 from the stored weights); npbert's
float32 output is reported beside it. A candidate passes when every stage it provides is
within atol + rtol * |reference| of the float64 reference, in the order the family computes
them: the lookups (word, token_type, position), their sum, a projection, the normalized sum,
the output (and a projection after it). The first stage that does not is where the bug is.
Before them come the candidate's inputs, where it gives them, checked value for value against
the reference's: a tokenizer's mistake is named before the lookups it leads to.
"""

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npbert.errors import InputError, first_line
from npbert.layer.inputs import check_mask, indexed, shown
from npbert.loading.npyfile import given_file, load_npy, load_npz

# Every stage name a family may have (npbert.layer.embedding), for reading a candidate's arrays.
STAGES = (
    "word",
    "token_type",
    "position",
    "sum",
    "embed_proj",
    "normalized",
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
        if weights is None or name not in reference64:
            continue
        x = next(stage for stage in inputs if stage in reference64)
        w, b = getattr(weights, weight), bias and getattr(weights, bias)
        atols[name] = max(atols[name], product_atol(reference64[x], w, b, atols[x], dtype))
    return atols


def load_candidate(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Another implementation's output: .npy (one output: OUTPUT), .npz or .safetensors
    (`embeddings` or `projected`, and any stage names), or .json (a nested list, OUTPUT, or
    an object of them)."""
    path = given_file(path, "candidate")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz", ".safetensors", ".json"):
        raise InputError(f"candidate {path}: use .npy, .npz, .safetensors or .json")
    if suffix == ".npy":
        return {OUTPUT: _numeric(f"candidate {path}", OUTPUT, load_npy(path, "candidate"))}
    arrays = load_npz(path, "candidate") if suffix == ".npz" else _load_other(path, suffix)

    def numeric(key: str, values) -> np.ndarray:
        array = _numeric(f"candidate {path}", key, values)
        return _json_width(array) if suffix == ".json" else array

    if not isinstance(arrays, dict):  # a JSON list
        return {OUTPUT: numeric(OUTPUT, arrays)}
    if not set(OUTPUTS) & set(arrays):
        raise InputError(
            f"candidate {path}: no 'embeddings' or 'projected' array (it has {sorted(arrays)})"
        )
    unknown = sorted(set(arrays) - set(STAGES) - set(INPUTS) - {METADATA})
    if unknown:  # a misspelled stage would otherwise go unchecked
        raise InputError(
            f"candidate {path}: {', '.join(map(repr, unknown))} is not a stage npbert knows "
            f"(stages: {', '.join(STAGES)}; inputs: {', '.join(INPUTS)})"
        )
    inputs = {key: arrays[key] for key in INPUTS if key in arrays}  # as they are: compare_inputs
    return {**inputs, **{key: numeric(key, arrays[key]) for key in STAGES if key in arrays}}


def _json_width(values: np.ndarray) -> np.ndarray:
    """JSON's numbers as float32 where each is a float32 written out, in full (Python's
    tolist(), JavaScript) or in at most 9 significant digits (C's %.9g, Go's and Rust's
    shortest form), which float32 reads back as it was: JSON says nothing of the width a port
    computed in, and float32 values read as float64 would be taken for a float64 port's
    (float64_stages). A float64 port writes 17 digits."""
    if values.dtype != np.float64:
        return values
    with np.errstate(over="ignore"):  # past float32's range: not float32 numbers, kept
        narrow = values.astype(np.float32)
    exact = (narrow == values) | np.isnan(values)
    rest = values[~exact]
    short = np.isfinite(narrow[~exact]).all() and all(
        float(f"{value:.9g}") == value for value in rest.tolist()
    )
    return narrow if short else values


def _load_other(path: Path, suffix: str) -> dict:
    """A .safetensors file's tensors, or a .json file's arrays as nested lists."""
    from safetensors import SafetensorError

    try:
        if suffix == ".safetensors":
            return _load_safetensors(path)
        # utf-8-sig: a byte order mark, as Windows tools may write, is not JSON but may be
        # ignored (RFC 8259); json.loads refuses it. RecursionError: nested too deep.
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except InputError:  # a ValueError, already saying what is wrong
        raise
    except (SafetensorError, ValueError, OSError, RecursionError) as error:
        raise InputError(f"candidate {path}: cannot read it ({first_line(error)})") from None
    if not isinstance(data, dict):
        return json_numbers(data)
    return {key: value if key in INPUTS else json_numbers(value) for key, value in data.items()}


# What JSON writers put for the numbers JSON cannot hold: JavaScript's JSON.stringify writes
# null for NaN and Infinity; npbert's --json, and others, write these strings.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_numbers(value):
    """A JSON array with null and NON_FINITE's strings as the floats they stand for, so that
    a candidate's NaN is reported where it is, as a .npy's is, not refused as no number."""
    if isinstance(value, list):
        return [json_numbers(item) for item in value]
    if value is None:
        return math.nan
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def _load_safetensors(path: Path) -> dict:
    """The tensors of a .safetensors file, its header checked against the file: float16 and
    bfloat16 (which NumPy lacks: a GPU's usual output) widened as a checkpoint's are, a dtype
    NumPy cannot hold (float8) refused by name."""
    from safetensors import safe_open

    from npbert.loading.checkpoint import STORED, describe, read_tensor
    from npbert.loading.header import read_file_header

    try:
        data_start, tensors = read_file_header(path)
    except InputError as error:  # it names the file: say what the file is
        raise InputError(f"candidate {error}") from None
    arrays = {}
    with safe_open(str(path), "numpy") as file:
        for name, info in tensors.items():
            if not info.shape:  # memory-mapped, it would fail: say it as _numeric does
                raise InputError(f"candidate {path}: '{name}' is a scalar, not an array")
            if info.dtype in STORED:
                arrays[name] = read_tensor(describe(path, name, data_start, tensors))
                continue
            try:
                arrays[name] = file.get_tensor(name)
            except (TypeError, AttributeError):  # NumPy has no such dtype
                raise InputError(
                    f"candidate {path}: '{name}' is {info.dtype}, which npbert cannot read; "
                    "give float64, float32, float16 or bfloat16"
                ) from None
    return arrays


def _numeric(where: str, key: str, value) -> np.ndarray:
    """value as an array of integers or floats, in its own dtype (widened to float64 by
    checked_candidate, where its shape fits)."""
    what = "its array" if key == OUTPUT else f"'{key}'"
    if isinstance(value, np.ndarray) and value.dtype.kind == "c":
        raise InputError(f"{where}: {what} is complex; embeddings are real numbers")
    try:
        array = np.asarray(value)  # as it is: float64 would parse strings and dates as numbers
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as error:
        # ragged lists ("inhomogeneous shape after 2 dimensions"), a torch bfloat16 tensor
        raise InputError(f"{where}: {what} is not a numeric array ({first_line(error)})") from None
    if array.dtype.kind not in "iuf":
        raise InputError(f"{where}: {what} is not a numeric array (it holds {array.dtype})")
    if array.ndim == 0:
        raise InputError(f"{where}: {what} is a scalar, not an array")
    return array


@dataclass
class StageResult:
    """One stage of the candidate against the float64 reference (and npbert's float32)."""

    name: str
    shape_ok: bool
    shapes: tuple  # (candidate shape, expected shape)
    max_abs: float = float("inf")
    max_rel: float = float("inf")
    max_abs_float32: float = float("inf")  # against npbert's float32 output
    max_rel_float32: float = float("inf")
    atol: float | None = None  # the atol it was held to
    ok: bool = False
    worst: dict = field(default_factory=dict)  # index, candidate, reference, npbert_float32
    batch_axis: str | None = None  # "added" or "dropped" to compare (BATCH_AXIS), or None
    padding_only: bool = False  # out of tolerance, but only where attention_mask is 0


def _align(name: str, candidate: np.ndarray, expected: np.ndarray, batch=None) -> tuple:
    """(expected in the candidate's shape, or None when the shapes disagree; BATCH_AXIS key).

    Shapes must match exactly, but for a batch axis of 1 that one of the two lacks, and
    position rows shared by the batch, (L, E), where the other gives them per sequence (the
    reference's rows all alike; `batch` sequences, the inputs' B). Nothing else broadcasts: a
    (2, 3, H) or (1, 1, 3, H) candidate for a (1, 3, H) reference is a wrong shape."""
    if candidate.shape == expected.shape:
        return expected, None
    if expected.ndim == 3 and expected.shape[0] == 1 and candidate.shape == expected.shape[1:]:
        return expected[0], "added"
    shared = name == "position" and expected.ndim == 2 and candidate.ndim == 3
    if shared and candidate.shape == (batch, *expected.shape):
        return np.broadcast_to(expected, candidate.shape), None
    shared = name == "position" and expected.ndim == 3 and candidate.ndim == 2
    if shared and expected.shape[1:] == candidate.shape and (expected == expected[0]).all():
        return expected[0], None  # positions from the padding (RoBERTa), alike in every row
    if expected.ndim == 2 and candidate.shape == (1, *expected.shape):
        return expected[None], "dropped"
    return None, None


# What the report's "batch_axis" says, when a batch axis of 1 was needed to compare.
BATCH_AXIS = {
    "added": "the candidate has no batch axis; compared as a batch of one sequence",
    "dropped": "the candidate has a batch axis of 1 that the reference lacks; compared without it",
}


def _errors(candidate: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, float]:
    """(|candidate - expected| with NaN as infinitely wrong, the max error relative to
    |expected|)."""
    error = np.abs(candidate - expected)
    error[np.isnan(error)] = np.inf
    scale = np.abs(expected)
    relative = np.divide(error, scale, out=np.full_like(error, np.inf), where=scale > 0)
    relative[error == 0] = 0.0
    return error, float(relative.max())


def compare_stage(
    name, candidate, reference64, reference32, atol, rtol, batch, mask=None
) -> StageResult:
    """One stage against the references, held to atol (stage_atols'). mask: the (B, L)
    attention_mask, to tell a stage wrong only in padding rows."""
    expected, batch_axis = _align(name, candidate, reference64, batch)
    if expected is None:
        return StageResult(name, False, (candidate.shape, reference64.shape))
    expected32, _ = _align(name, candidate, reference32, batch)
    error, max_rel = _errors(candidate, expected)
    error32, max_rel32 = _errors(candidate, expected32)
    worst = np.unravel_index(np.argmax(error), error.shape)
    ok = _within(error, expected, atol, rtol)
    return StageResult(
        name=name,
        shape_ok=True,
        shapes=(candidate.shape, candidate.shape),
        batch_axis=batch_axis,
        max_abs=float(error.max()),
        max_rel=max_rel,
        max_abs_float32=float(error32.max()),
        max_rel_float32=max_rel32,
        atol=atol,
        ok=ok,
        padding_only=not ok and _real_rows_within(error, expected, atol, rtol, mask),
        worst={
            "index": [int(i) for i in worst],
            "candidate": float(candidate[worst]),
            "reference": float(expected[worst]),
            "npbert_float32": float(expected32[worst]),
        },
    )


def _real_rows_within(error, expected, atol: float, rtol: float, mask) -> bool:
    """Whether a stage is within tolerance on every row where mask is 1: one out of it only in
    padding rows (a C loop over the real tokens left them) is right where it counts."""
    if mask is None or np.shape(mask) != error.shape[:2]:
        return False
    real = np.asarray(mask) != 0  # (B, L)
    return bool(real.any()) and _within(error[real], expected[real], atol, rtol)


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


def compare(
    candidate: dict,
    reference64: dict,
    reference32: dict,
    *,
    atol: float | None = None,
    rtol: float = DEFAULT_RTOL,
    inputs: dict | None = None,
    attention_mask=None,
    weights=None,
) -> dict:
    """The full report: every provided stage in order, the first that disagrees, and for the
    output its float32 ULP error and per-token cosine similarity. reference64 and reference32:
    embed_stages in float64 and float32 (project=True) for the same inputs. atol None: each
    stage's default_atol. A reference64 with NaN or Inf is refused: a candidate cannot be right or
    wrong against it.

    inputs: the reference's inputs, {name: array} as INPUTS names them (None where the layer
    takes none). The candidate's arrays of those names are checked first, value for value: a
    tokenizer's mistake shows there, before the lookups. Without it, they are left out.

    attention_mask: the (B, L) mask of the reference's inputs, 0 at padding: a stage out of
    tolerance only in padding rows says so in its notes (the verdict is still FAIL).

    weights: the checkpoint's EmbeddingWeights. With them, a stage that is a matrix product
    (projected, embed_proj) is held by default to what float32 products of its length and
    magnitude can differ by (product_atol), not to default_atol, which a correct port's
    float32 product can exceed."""
    check_references(reference64, reference32)
    check_finite(reference64, "npbert's float64 reference")
    ids = np.empty(reference64["word"].shape[:-1], np.intp)  # (B, L): the inputs' shape
    attention_mask = check_mask(attention_mask, ids)
    atol = None if atol is None else check_tolerance("atol", atol)
    rtol = check_tolerance("rtol", rtol)
    given = candidate
    candidate = checked_candidate(candidate, reference64)
    given_inputs = {key: value for key, value in given.items() if key in INPUTS}
    checked_inputs = compare_inputs(given_inputs, {} if inputs is None else inputs)
    batch = batch_size(reference64)
    atols = stage_atols(reference64, weights) if atol is None else dict.fromkeys(reference64, atol)
    with np.errstate(all="ignore"):  # a candidate's NaN, Inf or overflow is reported, not warned
        stages = [
            compare_stage(
                name,
                candidate[name],
                reference64[name],
                reference32[name],
                atols[name],
                rtol,
                batch,
                attention_mask,
            )
            for name in reference64
            if name in candidate
        ]
        summaries = {
            s.name: output_summary(s.name, candidate, reference64)
            for s in stages
            if s.name in OUTPUTS and s.shape_ok
        }
    bad_inputs = (name for name, result in checked_inputs.items() if not result["ok"])
    first_bad = next(bad_inputs, None) or next((s.name for s in stages if not s.ok), None)
    report = {
        "ok": first_bad is None,
        "tolerance": {"atol": atol, "rtol": rtol, "against": "npbert float64 reference"},
        "first_disagreeing_stage": first_bad,
        "unchecked_before_it": unchecked_before(first_bad, list(reference64), candidate),
        "inputs": checked_inputs,
        "stages": {s.name: _stage_dict(s) for s in stages},
    }
    report.update(summaries)
    bare = OUTPUT in given
    for name, notes in stage_notes(
        candidate, reference64, stages, bare, batch, attention_mask
    ).items():
        report["stages"][name]["notes"] = notes
    for name in PRODUCTS.keys() & report["stages"].keys():
        if atol is None and atols[name] > default_atol(reference64[name]):
            report["stages"][name].setdefault("notes", []).append(product_note(atols[name]))
    if atol is None:  # a float64 implementation held to float32's tolerance would not know
        for name in float64_stages(given, candidate) & {s.name for s in stages if s.shape_ok}:
            report["stages"][name].setdefault("notes", []).append(FLOAT64_HELD)
    return report


def product_note(atol: float) -> str:
    return (
        f"a matrix product, held to atol {atol:.3g}: what correct float32 products of its "
        "length and size can differ by"
    )


FLOAT64_HELD = (
    "float64 values, held to float32's tolerance: one computing in float64 comes far closer "
    f"(--atol {FLOAT64_ATOL:g} holds it to that)"
)


def float64_stages(given: dict, candidate: dict) -> set[str]:
    """The stages the candidate gave as float64 arrays (its unnamed output under the output
    name it was checked as)."""
    wide = {k for k, v in given.items() if isinstance(v, np.ndarray) and v.dtype == np.float64}
    if OUTPUT in wide:
        wide |= set(OUTPUTS) & (set(candidate) - set(given))
    return wide - {OUTPUT}


# The stages looked up from a table: each stands for itself alone. Every later stage is
# computed from all the stages before it (their sum, then one step after another).
LOOKUPS = ("word", "token_type", "position")


def unchecked_before(bad: str | None, order: list[str], given) -> list[str]:
    """The stages before `bad`, in the layer's order, that could be at fault and were not
    checked: not given, and not vouched for by a later stage given within tolerance (every
    stage given before `bad` is). A stage after the lookups vouches for all before it, as it
    is computed from them; a lookup for itself alone. [] where `bad` is an input, a lookup
    (it depends on no other stage) or None."""
    if bad not in order or bad in LOOKUPS:
        return []
    before = order[: order.index(bad)]
    vouched = set()
    for position, name in enumerate(before):
        if name in given:
            vouched.update([name] if name in LOOKUPS else before[: position + 1])
    return [name for name in before if name not in vouched]


def check_references(reference64, reference32) -> None:
    """InputError unless the two are embed_stages' stages of one input, in float64 and float32
    (embed's output alone, or the two swapped, would be checked against the wrong numbers)."""
    for name, stages, dtype in (("reference64", reference64, "float64"),
                                ("reference32", reference32, "float32")):  # fmt: skip
        usage = f"{name} must be embed_stages(..., dtype=np.{dtype}, project=True)"
        if not isinstance(stages, dict) or not {"word", "embeddings"} <= stages.keys():
            raise InputError(f"{usage}: a dict of stages with 'word' and 'embeddings'")
        for key, values in stages.items():
            if not isinstance(values, np.ndarray) or values.dtype != dtype:
                raise InputError(f"{usage}: its {key!r} is {_kind(values)}, not {dtype}")
    shapes64 = {key: values.shape for key, values in reference64.items()}
    if shapes64 != {key: values.shape for key, values in reference32.items()}:
        raise InputError(
            "reference64 and reference32 must be the stages of the same inputs; their stages "
            "or shapes differ"
        )


def _kind(value) -> str:
    return f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__


def compare_inputs(given: dict, reference: dict) -> dict:
    """Each input the candidate gives that the reference has (not None), value for value:
    {name: input_result}. One given as None (a JSON null) is not checked; one that is not an
    array of numbers (or bools) is refused, as a port that wrote it wrong."""
    if not isinstance(reference, dict):
        raise InputError(f"inputs must be a dict of input names to arrays, not {shown(reference)}")
    results = {}
    for name in INPUTS:
        if reference.get(name) is None:  # the layer takes none
            continue
        expected = input_array(reference[name])
        if expected is None:
            raise InputError(f"inputs[{name!r}] is not an array of ids: {shown(reference[name])}")
        if given.get(name) is None:
            continue
        mine = input_array(given[name])
        if mine is None:
            raise InputError(
                f"the candidate's {name} is not an array of numbers NumPy can hold: "
                f"{shown(given[name])} (leave it out to have it not checked)"
            )
        results[name] = input_result(mine, expected)
    return results


def input_array(value) -> np.ndarray | None:
    """value as an array of numbers or bools of at least one axis, or None (absent, null)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None
    return array if array.dtype.kind in "biuf" and array.ndim else None


def input_result(mine: np.ndarray, expected: np.ndarray) -> dict:
    """{"ok", "differ", "of", "first": {index, candidate, reference}} for one input, (B, L) or
    (L,): the same shape, or (L,) rows a batch shares against (B, L) ones or the reverse; for
    other shapes {"ok": False, "candidate_shape", "expected_shape"}, and for rows of another
    length also where they part: "first" within the shorter length, or "agree", that length."""
    shared = {mine.ndim, expected.ndim} == {1, 2} and mine.shape[-1] == expected.shape[-1]
    if mine.shape != expected.shape and not shared:
        result = {
            "ok": False,
            "candidate_shape": list(mine.shape),
            "expected_shape": list(expected.shape),
        }
        if mine.ndim == expected.ndim and mine.shape[:-1] == expected.shape[:-1]:
            # other lengths (a tokenizer's mistake): where do the rows part?
            n = min(mine.shape[-1], expected.shape[-1])
            result.update(_first_difference(mine[..., :n], expected[..., :n]))
            result["agree"] = 0 if "first" in result else n
        return result
    shape = np.broadcast_shapes(mine.shape, expected.shape)
    mine, expected = np.broadcast_to(mine, shape), np.broadcast_to(expected, shape)
    differ = mine != expected  # (B, L) or (L,); NaN differs from every id
    result = {"ok": not differ.any(), "differ": int(differ.sum()), "of": differ.size}
    return result | _first_difference(mine, expected)


def _first_difference(mine: np.ndarray, expected: np.ndarray) -> dict:
    """{"first": {index, candidate, reference}}, the first place two arrays of one shape
    differ, or {} where they agree."""
    differ = mine != expected
    if not differ.any():
        return {}
    at = tuple(np.argwhere(differ)[0])
    return {
        "first": {
            "index": [int(i) for i in at],
            "candidate": mine[at].item(),
            "reference": expected[at].item(),
        }
    }


def checked_candidate(candidate, reference64: dict) -> dict:
    """The candidate's stages as numeric arrays, float64 where their shape fits the
    reference's, its inputs (what npbert embed --out writes beside them) left out, as
    load_candidate leaves them; or InputError."""
    if not isinstance(candidate, dict) or not all(isinstance(k, str) for k in candidate):
        raise InputError("the candidate must be a dict of stage names (str) to arrays")
    candidate = {k: v for k, v in candidate.items() if k not in INPUTS and k != METADATA}
    candidate = named_output(candidate, reference64)
    if not set(OUTPUTS) & set(candidate):
        raise InputError(
            f"the candidate has no 'embeddings' or 'projected' (it has {sorted(candidate)})"
        )
    unknown = sorted(set(candidate) - set(reference64))
    if unknown == ["projected"]:  # ALBERT's, say: the references were made without it
        raise InputError(
            "the candidate has 'projected', which the references lack: the family has no "
            "projection after its layer, or the references were made without "
            "embed_stages(..., project=True)"
        )
    if unknown:
        raise InputError(
            f"the candidate has {', '.join(unknown)}, which the references do not have "
            f"(this family's stages: {', '.join(reference64)})"
        )
    arrays = {key: _numeric("the candidate", key, value) for key, value in candidate.items()}
    batch = batch_size(reference64)
    return {key: _widened(key, array, reference64[key], batch) for key, array in arrays.items()}


def batch_size(reference64: dict) -> int | None:
    """B, the sequences of the inputs, or None for one sequence given as (L,)."""
    word = reference64["word"]  # (B, L, E) or (L, E): every family looks words up
    return word.shape[0] if word.ndim == 3 else None


def named_output(candidate: dict, reference64: dict) -> dict:
    """The candidate with its OUTPUT (a .npy's array) under the output whose shape it has:
    "embeddings", or "projected" where the family projects after its layer (what `npbert
    embed --project` writes). Where the two have the same shape (an ALBERT of E = H), which
    it is cannot be told: InputError."""
    if OUTPUT not in candidate:
        return candidate
    rest = {key: value for key, value in candidate.items() if key != OUTPUT}
    array = _numeric("the candidate", OUTPUT, candidate[OUTPUT])
    fits = [name for name in OUTPUTS if name in reference64 and name not in rest]
    fits = [name for name in fits if _align(name, array, reference64[name])[0] is not None]
    if len(fits) > 1:
        raise InputError(
            f"the candidate's one array {array.shape} has the shape of both the layer's output "
            "and its projection here, and names neither: give it as 'embeddings' or 'projected' "
            "in an .npz or .safetensors file"
        )
    return {fits[0] if fits else "embeddings": array, **rest}


def _widened(name: str, array: np.ndarray, reference64: np.ndarray, batch) -> np.ndarray:
    """The array as float64 if its shape fits the reference's; else as it is, to be reported
    by its shape (a large candidate of the wrong shape is not copied to be told so)."""
    if _align(name, array, reference64, batch)[0] is None:
        return array
    return array.astype(np.float64, copy=False)


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
    "the padded ids with --ids-file and the mask with --attention-mask-file to compare all"
)
WHOLE_NUMBERS = (
    "every value is a whole number, as token ids are, where this stage holds the layer's "
    "real-valued rows: ids given as the candidate? (ids to embed go in --ids-file)"
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


def narrow_format(name: str | None, distance: float) -> str | None:
    """A note where every value of a failing stage, not all whole numbers, is a float16 or
    bfloat16 number (`name`, as _narrow finds it): the candidate was stored or computed in
    it, and rounding the reference to it alone puts it `distance` away (a failure that may be
    the format, not the math); None otherwise."""
    if not distance:  # not of such a format, or the reference is too (a float16 checkpoint's)
        return None
    return (
        f"every value is a {name} number: the reference rounded to {name} is itself "
        f"{distance:.3g} from the reference"
    )


def _narrow(values: np.ndarray, reference: np.ndarray) -> tuple[str | None, float]:
    """(float16 or bfloat16, how far rounding the reference to it puts it) where every value,
    not all whole numbers, is a number of that format; (None, 0.0) otherwise."""
    if values.size == 0 or np.array_equal(values, np.round(values), equal_nan=True):
        return None, 0.0
    with np.errstate(all="ignore"):  # casts of a candidate's huge values overflow: not these
        # bfloat16 first: its numbers (8 significant bits) within float16's range are float16
        # numbers too (11 bits), while float16's are seldom all bfloat16's.
        if _is_bfloat16(values):
            name, rounded = "bfloat16", _to_bfloat16(reference)
        elif np.array_equal(values, values.astype(np.float16), equal_nan=True):
            name, rounded = "float16", reference.astype(np.float16)
        else:
            return None, 0.0
        return name, float(np.abs(rounded - reference).max())


def _is_bfloat16(values: np.ndarray) -> bool:
    """Whether every value is a float32 whose lower 16 bits are 0: a bfloat16 number."""
    narrow = values.astype(np.float32)
    same = np.array_equal(values, narrow, equal_nan=True)
    return same and not (narrow.view(np.uint32) & 0xFFFF).any()


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """values rounded to the nearest bfloat16 (ties to even), as float32: NumPy has no
    bfloat16, and this is how torch rounds float32 to it."""
    bits = values.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def output_summary(name: str, candidate: dict, reference64: dict) -> dict:
    """An output's float32 ULPs from the float64 reference and its worst token's cosine.

    ULPs leave out the values where the reference is exactly 0 (DeBERTa's padding rows): a
    float32 step there is 1.4e-45, and a candidate that gets 0 would pull the median down as
    much as one off by 1e-8 would push the maximum to 1e37; max |diff| covers them."""
    expected, _ = _align(name, candidate[name], reference64[name])
    nonzero = expected != 0
    ulp = ulps(candidate[name][nonzero], expected[nonzero])  # (values,)
    ulp[np.isnan(ulp)] = np.inf
    cos = cosines(candidate[name], expected)  # (..., L)
    cos[np.isnan(cos)] = -np.inf  # a token with NaN is the worst token
    return {
        "max_ulp_float32": float(ulp.max()) if ulp.size else None,  # None: every value is 0
        "median_ulp_float32": float(np.median(ulp)) if ulp.size else None,
        "zero_reference_values": int(nonzero.size - nonzero.sum()),
        "min_token_cosine": float(cos.min()),
        "worst_token": [int(i) for i in np.unravel_index(np.argmin(cos), cos.shape)],
    }


def _stage_dict(stage: StageResult) -> dict:
    if not stage.shape_ok:
        return {
            "ok": False,
            "candidate_shape": list(stage.shapes[0]),
            "expected_shape": list(stage.shapes[1]),
        }
    return {
        "ok": stage.ok,
        "atol": stage.atol,
        "max_abs": stage.max_abs,
        "max_rel": stage.max_rel,
        "max_abs_vs_npbert_float32": stage.max_abs_float32,
        "max_rel_vs_npbert_float32": stage.max_rel_float32,
        "worst": stage.worst,
        "batch_axis": stage.batch_axis,
    }


def _note_lines(notes) -> list[str]:
    """A stage's notes, a line each, under its line."""
    return [f"  {'':<14} note:  {note}" for note in notes]


def _output_line(name: str, out: dict) -> str:
    """An output's ULPs from the reference (but where it is 0) and its worst token's cosine."""
    zeros = out["zero_reference_values"]
    if out["max_ulp_float32"] is None:
        ulps_text = f"none, the reference is 0 at all {zeros} values"
    else:
        ulps_text = f"max {out['max_ulp_float32']:.3g}, median {out['median_ulp_float32']:.3g}"
        ulps_text += f" (leaving out {zeros} values where the reference is 0)" if zeros else ""
    return (
        f"  {name}: float32 ULPs from the float64 reference: {ulps_text}; "
        f"min token cosine {out['min_token_cosine']:.9f} at {tuple(out['worst_token'])}"
    )


def _input_line(name: str, result: dict) -> str:
    """One input's line: ok, FAIL with the first difference, or SHAPE."""
    if "candidate_shape" in result:
        shapes = f"candidate {tuple(result['candidate_shape'])}, "
        line = f"  {name:<14} SHAPE  {shapes}expected {tuple(result['expected_shape'])}"
        if "first" in result:
            first = result["first"]
            line += f"; the first difference at {tuple(first['index'])}: "
            line += f"{first['candidate']} vs {first['reference']}"
        elif result.get("agree"):
            line += f"; the first {result['agree']} of each row agree"
        return line
    if result["ok"]:
        return f"  {name:<14} ok     all {result['of']} as the reference's"
    first = result["first"]
    return (
        f"  {name:<14} FAIL   {result['differ']} of {result['of']} differ; the first at "
        f"{tuple(first['index'])}: {first['candidate']} vs {first['reference']}"
    )


DEFAULT_ATOL_TEXT = f"{DEFAULT_ATOL:g} (or {STEPS} float32 steps of a stage's largest value)"


def format_report(report: dict) -> str:
    """The report for people: one line a stage, then the output's details and the verdict."""
    tol = report["tolerance"]
    atol = DEFAULT_ATOL_TEXT if tol["atol"] is None else f"{tol['atol']:g}"
    lines = [f"tolerance: atol {atol}, rtol {tol['rtol']:g} ({tol['against']})"]
    for name, result in report["inputs"].items():
        notes = [result["note"]] if "note" in result else []
        lines += [_input_line(name, result), *_note_lines(notes)]
    for name, stage in report["stages"].items():
        if "max_abs" not in stage:
            lines.append(
                f"  {name:<14} SHAPE  candidate {tuple(stage['candidate_shape'])}, "
                f"expected {tuple(stage['expected_shape'])}"
            )
            lines += _note_lines(stage.get("notes", ()))
            continue
        worst = stage["worst"]
        raised = tol["atol"] is None and stage["atol"] > DEFAULT_ATOL  # large values
        lines.append(
            f"  {name:<14} {'ok  ' if stage['ok'] else 'FAIL'}   max |diff| {stage['max_abs']:.3g}"
            f" (vs npbert's float32 spec {stage['max_abs_vs_npbert_float32']:.3g}),"
            f" max rel {stage['max_rel']:.3g}; worst at {tuple(worst['index'])}:"
            f" {worst['candidate']:.8g} vs {worst['reference']:.8g}"
            + (f"; held to atol {stage['atol']:.3g}" if raised else "")
        )
        batch_axis = [BATCH_AXIS[stage["batch_axis"]]] if stage["batch_axis"] else []
        lines += _note_lines([*batch_axis, *stage.get("notes", ())])
    lines += [_output_line(name, report[name]) for name in OUTPUTS if name in report]
    lines.append(verdict(report))
    return "\n".join(lines)


def verdict(report: dict) -> str:
    """PASS, or FAIL with the first stage that disagrees; where stages before it were not
    checked (only the output given, say), those are named as where the fault may be too."""
    bad = report["first_disagreeing_stage"]
    if bad is None:
        return "PASS: every stage within tolerance"
    unchecked = report["unchecked_before_it"]
    if not unchecked:
        return f"FAIL: the first stage that disagrees is '{bad}'"
    one = len(unchecked) == 1
    return (
        f"FAIL: '{bad}' is the first stage given that disagrees; {', '.join(unchecked)} "
        f"{'was' if one else 'were'} not checked, and the fault may be there: give "
        f"{'it' if one else 'them'} too (an .npz of every stage, as `npbert embed --stages` "
        "writes) to find it"
    )
