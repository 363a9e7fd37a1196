"""Checking another implementation's embeddings against npbert, stage by stage.

The reference is npbert in float64 (every step in float64 from the stored weights); npbert's
float32 output is reported beside it. A candidate passes when every stage it provides is
within atol + rtol * |reference| of the float64 reference, in the order the family computes
them: the lookups (word, token_type, position), their sum, a projection, the normalized sum,
the output (and a projection after it). The first stage that does not is where the bug is.
Before them come the candidate's inputs, where it gives them, checked value for value against
the reference's: a tokenizer's mistake is named before the lookups it leads to.
"""

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import check_mask
from npbert.verify.candidates import _align, batch_size, checked_candidate
from npbert.verify.diagnosis import diagnosis_of
from npbert.verify.inputs import _kind, compare_inputs
from npbert.verify.notes import FLOAT64_HELD, product_note, stage_notes
from npbert.verify.result import StageResult
from npbert.verify.tolerances import (
    DEFAULT_RTOL,
    INPUTS,
    OUTPUT,
    OUTPUTS,
    PRODUCTS,
    _errors,
    _within,
    check_finite,
    check_tolerance,
    cosines,
    default_atol,
    stage_atols,
    ulps,
)


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
    """The full report: each stage the candidate gives, in the layer's order, against
    reference64 and reference32 (embed_stages in float64 and float32, project=True, for the
    same inputs), the first that disagrees, and for the output its float32 ULPs and per-token
    cosines. atol None: each stage's own (stage_atols; with `weights`, a product stage's allows
    what correct float32 products differ by). inputs: the reference's {name: array}, checked
    value for value against the candidate's first. attention_mask (B, L): a stage wrong only
    in padding rows says so. A reference with NaN or Inf is refused. A failing candidate gets
    a diagnosis (npbert.verify.diagnosis): the known bugs that reproduce it, where `weights`
    and the reference's input_ids are given."""
    mask, atol, rtol = checked_arguments(reference64, reference32, attention_mask, atol, rtol)
    given, candidate = candidate, checked_candidate(candidate, reference64)
    given_inputs = {key: value for key, value in given.items() if key in INPUTS}
    checked_inputs = compare_inputs(given_inputs, {} if inputs is None else inputs)
    batch = batch_size(reference64)
    atols = stage_atols(reference64, weights) if atol is None else dict.fromkeys(reference64, atol)
    stages = compare_stages(candidate, (reference64, reference32), atols, rtol, batch, mask)
    tolerance = {"atol": atol, "rtol": rtol, "against": "npbert float64 reference"}
    report = report_of(stages, checked_inputs, candidate, reference64, tolerance)
    notes = stage_notes(candidate, reference64, stages, OUTPUT in given, batch, mask)
    if atol is None:  # what the default tolerance was for a stage, where it is not the usual
        add_tolerance_notes(notes, stages, atols, reference64, float64_stages(given, candidate))
    for name, said in notes.items():
        report["stages"][name]["notes"] = said
    context = dict(weights=weights, inputs=inputs, mask=mask, atols=atols, rtol=rtol)
    report["diagnosis"] = diagnosis_of(report, candidate, reference64, context | {"batch": batch})
    return report


def checked_arguments(reference64, reference32, attention_mask, atol, rtol) -> tuple:
    """compare's references, mask and tolerances checked: (the mask, atol, rtol)."""
    check_references(reference64, reference32)
    check_finite(reference64, "npbert's float64 reference")
    ids = np.empty(reference64["word"].shape[:-1], np.intp)  # (B, L): the inputs' shape
    atol = None if atol is None else check_tolerance("atol", atol)
    return check_mask(attention_mask, ids), atol, check_tolerance("rtol", rtol)


def report_of(stages: list, checked_inputs: dict, candidate, reference64, tolerance) -> dict:
    """The report's verdict, inputs, stages and output summaries (compare adds the rest)."""
    bad_inputs = (name for name, result in checked_inputs.items() if not result["ok"])
    first_bad = next(bad_inputs, None) or next((s.name for s in stages if not s.ok), None)
    with np.errstate(all="ignore"):  # a candidate's NaN, Inf or overflow is reported, not warned
        summaries = {s.name: output_summary(s.name, candidate, reference64)
                     for s in stages if s.name in OUTPUTS and s.shape_ok}  # fmt: skip
    return {
        "ok": first_bad is None,
        "tolerance": tolerance,
        "first_disagreeing_stage": first_bad,
        "unchecked_before_it": unchecked_before(first_bad, list(reference64), candidate),
        "inputs": checked_inputs,
        "stages": {s.name: _stage_dict(s) for s in stages},
    } | summaries


def compare_stages(candidate: dict, references, atols: dict, rtol: float, batch, mask) -> list:
    """compare_stage for each stage the candidate gives, in the reference's order."""
    reference64, reference32 = references
    with np.errstate(all="ignore"):  # a candidate's NaN, Inf or overflow is reported, not warned
        return [
            compare_stage(name, candidate[name], reference64[name], reference32[name],
                          atols[name], rtol, batch, mask)
            for name in reference64
            if name in candidate
        ]  # fmt: skip


def add_tolerance_notes(notes: dict, stages: list, atols: dict, reference64: dict, wide: set):
    """A product stage held to more than default_atol says so, and float64 values held to
    float32's tolerance say that one computing in float64 would know more."""
    for stage in stages:
        said = notes.get(stage.name, [])
        if stage.name in PRODUCTS and atols[stage.name] > default_atol(reference64[stage.name]):
            said.append(product_note(atols[stage.name]))
        if stage.name in wide and stage.shape_ok:
            said.append(FLOAT64_HELD)
        if said:
            notes[stage.name] = said


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
