"""Checking another implementation's embeddings against npbert, stage by stage.

The reference is npbert in float64 (every step in float64 from the stored weights); npbert's
float32 output is reported beside it. A candidate passes when every stage it provides is
within atol + rtol * |reference| of the float64 reference, in the order the family computes
them: the lookups (word, token_type, position), their sum, a projection, the normalized sum,
the output (and a projection after it). The first stage that does not is where the bug is.
"""

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npbert.errors import InputError, first_line
from npbert.inputs import indexed
from npbert.npyfile import load_npy, load_npz, regular_file

# Every stage name a family may have (npbert.embedding), for reading a candidate's arrays.
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

# What npbert embed --out writes beside the embeddings: inputs, not stages to check.
INPUTS = ("input_ids", "token_type_ids", "position_ids", "attention_mask", "metadata")

DEFAULT_ATOL = 1e-5  # what Hugging Face's and ONNX export checks use
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


def load_candidate(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Another implementation's output: .npy (one output: OUTPUT), .npz or .safetensors
    (`embeddings` or `projected`, and any stage names), or .json (a nested list, OUTPUT, or
    an object of them)."""
    path = regular_file(path, "candidate")
    if not path.is_file():
        raise InputError(f"candidate {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz", ".safetensors", ".json"):
        raise InputError(f"candidate {path}: use .npy, .npz, .safetensors or .json")
    if suffix == ".npy":
        return {OUTPUT: _numeric(f"candidate {path}", OUTPUT, load_npy(path, "candidate"))}
    arrays = load_npz(path, "candidate") if suffix == ".npz" else _load_other(path, suffix)
    if not isinstance(arrays, dict):  # a JSON list
        return {OUTPUT: _numeric(f"candidate {path}", OUTPUT, arrays)}
    if not set(OUTPUTS) & set(arrays):
        raise InputError(
            f"candidate {path}: no 'embeddings' or 'projected' array (it has {sorted(arrays)})"
        )
    unknown = sorted(set(arrays) - set(STAGES) - set(INPUTS))
    if unknown:  # a misspelled stage would otherwise go unchecked
        raise InputError(
            f"candidate {path}: {', '.join(map(repr, unknown))} is not a stage npbert knows "
            f"(stages: {', '.join(STAGES)}; inputs ignored: {', '.join(INPUTS)})"
        )
    return {key: _numeric(f"candidate {path}", key, arrays[key]) for key in STAGES if key in arrays}


def _load_other(path: Path, suffix: str) -> dict:
    """A .safetensors file's tensors, or a .json file's arrays as nested lists."""
    from safetensors import SafetensorError

    try:
        if suffix == ".safetensors":
            return _load_safetensors(path)
        data = json.loads(path.read_text(encoding="utf-8"))  # RecursionError when nested deep
    except InputError:  # a ValueError, already saying what is wrong
        raise
    except (SafetensorError, ValueError, OSError, RecursionError) as error:
        raise InputError(f"candidate {path}: cannot read it ({first_line(error)})") from None
    return data


def _load_safetensors(path: Path) -> dict:
    """The tensors of a .safetensors file, its header checked against the file: float16 and
    bfloat16 (which NumPy lacks: a GPU's usual output) widened as a checkpoint's are, a dtype
    NumPy cannot hold (float8) refused by name."""
    from safetensors import safe_open

    from npbert.checkpoint import STORED, describe, read_tensor
    from npbert.header import read_file_header

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
        if array.dtype.kind not in "iuf":
            raise TypeError(array.dtype)
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError):
        raise InputError(f"{where}: {what} is not a numeric array") from None
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


def compare_stage(name, candidate, reference64, reference32, atol, rtol, batch) -> StageResult:
    """One stage against the references; atol None: default_atol of the reference."""
    expected, batch_axis = _align(name, candidate, reference64, batch)
    if expected is None:
        return StageResult(name, False, (candidate.shape, reference64.shape))
    atol = default_atol(reference64) if atol is None else atol
    expected32, _ = _align(name, candidate, reference32, batch)
    error, max_rel = _errors(candidate, expected)
    error32, max_rel32 = _errors(candidate, expected32)
    worst = np.unravel_index(np.argmax(error), error.shape)
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
        ok=_within(error, expected, atol, rtol),
        worst={
            "index": [int(i) for i in worst],
            "candidate": float(candidate[worst]),
            "reference": float(expected[worst]),
            "npbert_float32": float(expected32[worst]),
        },
    )


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
        raise InputError(f"{name} must be a finite number of at least 0, got {value!r}")
    return tolerance


def compare(candidate: dict, reference64: dict, reference32: dict, *, atol, rtol) -> dict:
    """The full report: every provided stage in order, the first that disagrees, and for the
    output its float32 ULP error and per-token cosine similarity. atol None: each stage's
    default_atol. A reference64 with NaN or Inf is refused: a candidate cannot be right or
    wrong against it."""
    check_finite(reference64, "npbert's float64 reference")
    atol = None if atol is None else check_tolerance("atol", atol)
    rtol = check_tolerance("rtol", rtol)
    candidate = checked_candidate(candidate, reference64)
    batch = batch_size(reference64)
    with np.errstate(all="ignore"):  # a candidate's NaN, Inf or overflow is reported, not warned
        stages = [
            compare_stage(
                name, candidate[name], reference64[name], reference32[name], atol, rtol, batch
            )
            for name in reference64
            if name in candidate
        ]
        summaries = {
            s.name: output_summary(s.name, candidate, reference64)
            for s in stages
            if s.name in OUTPUTS and s.shape_ok
        }
    first_bad = next((s.name for s in stages if not s.ok), None)
    report = {
        "ok": first_bad is None,
        "tolerance": {"atol": atol, "rtol": rtol, "against": "npbert float64 reference"},
        "first_disagreeing_stage": first_bad,
        "stages": {s.name: _stage_dict(s) for s in stages},
    }
    report.update(summaries)
    if _projected_as_embeddings(candidate, reference64):
        report["stages"]["embeddings"]["note"] = PROJECTED_AS_EMBEDDINGS
    return report


def checked_candidate(candidate, reference64: dict) -> dict:
    """The candidate's stages as numeric arrays, float64 where their shape fits the
    reference's, its inputs (what npbert embed --out writes beside them) left out, as
    load_candidate leaves them; or InputError."""
    if not isinstance(candidate, dict) or not all(isinstance(k, str) for k in candidate):
        raise InputError("the candidate must be a dict of stage names (str) to arrays")
    candidate = {key: value for key, value in candidate.items() if key not in INPUTS}
    candidate = named_output(candidate, reference64)
    if not set(OUTPUTS) & set(candidate):
        raise InputError(
            f"the candidate has no 'embeddings' or 'projected' (it has {sorted(candidate)})"
        )
    unknown = sorted(set(candidate) - set(reference64))
    if unknown:
        raise InputError(
            f"the candidate has {', '.join(unknown)}, which this family does not compute "
            f"(its stages: {', '.join(reference64)})"
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


PROJECTED_AS_EMBEDDINGS = (
    "this is the shape of 'projected', the projection to the hidden size: give it under "
    "that name (an .npz or .safetensors array)"
)


def _projected_as_embeddings(candidate: dict, reference64: dict) -> bool:
    """Whether the candidate's 'embeddings' fail by shape where they would fit 'projected'
    (a .npy of the output the first encoder layer receives, for ALBERT, say)."""
    if "projected" not in reference64 or "projected" in candidate or "embeddings" not in candidate:
        return False
    embeddings = candidate["embeddings"]
    return (
        _align("embeddings", embeddings, reference64["embeddings"])[0] is None
        and _align("projected", embeddings, reference64["projected"])[0] is not None
    )


def output_summary(name: str, candidate: dict, reference64: dict) -> dict:
    """An output's float32 ULPs from the float64 reference and its worst token's cosine."""
    expected, _ = _align(name, candidate[name], reference64[name])
    ulp = ulps(candidate[name], expected)
    ulp[np.isnan(ulp)] = np.inf
    cos = cosines(candidate[name], expected)  # (..., L)
    cos[np.isnan(cos)] = -np.inf  # a token with NaN is the worst token
    return {
        "max_ulp_float32": float(ulp.max()),
        "median_ulp_float32": float(np.median(ulp)),
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


DEFAULT_ATOL_TEXT = f"{DEFAULT_ATOL:g} (or {STEPS} float32 steps of a stage's largest value)"


def format_report(report: dict) -> str:
    """The report for people: one line a stage, then the output's details and the verdict."""
    tol = report["tolerance"]
    atol = DEFAULT_ATOL_TEXT if tol["atol"] is None else f"{tol['atol']:g}"
    lines = [f"tolerance: atol {atol}, rtol {tol['rtol']:g} ({tol['against']})"]
    for name, stage in report["stages"].items():
        if "max_abs" not in stage:
            lines.append(
                f"  {name:<11} SHAPE  candidate {tuple(stage['candidate_shape'])}, "
                f"expected {tuple(stage['expected_shape'])}"
            )
            if "note" in stage:
                lines.append(f"  {'':<11} note:  {stage['note']}")
            continue
        worst = stage["worst"]
        raised = tol["atol"] is None and stage["atol"] > DEFAULT_ATOL  # large values
        lines.append(
            f"  {name:<11} {'ok  ' if stage['ok'] else 'FAIL'}   max |diff| {stage['max_abs']:.3g}"
            f" (vs npbert's float32 spec {stage['max_abs_vs_npbert_float32']:.3g}),"
            f" max rel {stage['max_rel']:.3g}; worst at {tuple(worst['index'])}:"
            f" {worst['candidate']:.8g} vs {worst['reference']:.8g}"
            + (f"; held to atol {stage['atol']:.3g}" if raised else "")
        )
        if stage["batch_axis"]:
            lines.append(f"  {'':<11} note:  {BATCH_AXIS[stage['batch_axis']]}")
    for name in (name for name in OUTPUTS if name in report):
        out = report[name]
        lines.append(
            f"  {name}: float32 ULPs from the float64 reference: max "
            f"{out['max_ulp_float32']:.3g}, median {out['median_ulp_float32']:.3g}; "
            f"min token cosine {out['min_token_cosine']:.9f} at {tuple(out['worst_token'])}"
        )
    bad = report["first_disagreeing_stage"]
    lines.append(
        "PASS: every stage within tolerance"
        if bad is None
        else f"FAIL: the first stage that disagrees is '{bad}'"
    )
    return "\n".join(lines)
