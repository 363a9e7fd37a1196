"""What a failing candidate's numbers say of its bug: each known bug (npbert.verify.bugs) that
applies, its parameter fitted, computed and held against the candidate's stages; and the
forms a layer's output should not have (dropout left on, one pooled vector per text), told
from the output alone. Run only when a compare fails.
"""

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import prepare_inputs
from npbert.verify.bugs import CATALOG, ROUNDINGS, Bug, narrow_computation
from npbert.verify.candidates import _align, _narrow
from npbert.verify.mutations import Case

# A mutant whose misfit (its largest difference from the candidate, in units of the stage's
# tolerance) is this fraction of the reference's or less is named too, as likely: a port in
# float16, say, is not within float32's tolerance of any mutant computed in float64.
CLOSER = 0.02

# The share of an output's values that dropout's zeros may be (p of 0.01 to 0.9).
DROPOUT_SHARE = (0.01, 0.9)


def diagnose(candidate: dict, case: Case, atols: dict, rtol: float, batch) -> list[dict]:
    """The bugs that reproduce the candidate, best first: each {name, says, residual (the
    largest |difference| from the mutant), value (the fitted parameter, or None), within
    (whether within tolerance of the mutant, not only far closer than to the reference)}.
    candidate: checked_candidate's; atols: each stage's; batch: batch_size's."""
    reference = misfit(candidate, case.reference, atols, rtol, batch)
    found = [fitted(bug, case, candidate, atols, rtol, batch, reference) for bug in CATALOG]
    found += [form(candidate, case, atols) for form in FORMS]
    return sorted((entry for entry in found if entry), key=lambda entry: entry.pop("misfit"))


def fitted(bug: Bug, case: Case, candidate: dict, atols, rtol, batch, reference) -> dict | None:
    """The bug's best mutant, where it reproduces the candidate (within tolerance, or CLOSER
    than the reference is) and differs from the reference where the candidate is given."""
    best = None
    for value, stages in bug.mutants(case):
        if stages is None or not lines_up(candidate, stages, atols, batch):
            continue
        fit = misfit(candidate, stages, atols, rtol, batch)
        if fit is None or (best is not None and fit[0] >= best[0]):
            continue
        if is_reference(stages, case.reference, candidate, atols, rtol, batch):
            continue  # it cannot be told from the reference here
        best = (*fit, value)
    far_closer = best is not None and reference is not None and best[0] <= CLOSER * reference[0]
    if best is None or not (best[0] <= 1 or far_closer):  # (reference None: of other shapes)
        return None
    ratio, residual, value = best
    what = bug.what.format(value=value)
    fix = bug.fix.format(value=value, expected=bug.expected(case))
    return {
        "name": bug.name,
        "says": f"matches the reference with {what} (max |diff| {residual:.2g}): {fix}",
        "residual": residual,
        "value": value,
        "within": bool(ratio <= 1),
        "misfit": ratio,
    }


def lines_up(candidate: dict, stages: dict, atols: dict, batch) -> bool:
    """Whether each stage the candidate gives that the mutant computes has a shape to compare
    with it: a mutant that fits the output alone, where the candidate's projection has
    another shape, is not its bug."""
    given = (name for name in candidate if name in stages and name in atols)
    return all(_align(name, candidate[name], stages[name], batch)[0] is not None for name in given)


def is_reference(stages: dict, reference: dict, candidate: dict, atols, rtol, batch) -> bool:
    """Whether the mutant is the reference where the candidate is given: of its shapes and
    within tolerance of it (a projection left out is of another shape, and told apart)."""
    shaped = all(
        np.shape(stages[name]) == np.shape(reference[name])
        for name in candidate
        if name in stages and name in reference
    )
    same = misfit(stages, reference, atols, rtol, batch, only=candidate)
    return shaped and same is not None and same[0] <= 1


def misfit(candidate: dict, stages: dict, atols: dict, rtol: float, batch, only=None):
    """(the largest |difference| of a stage in units of its atol + rtol * |value|, the largest
    |difference|) over the stages both have (of `only`'s names, where given), or None where
    they share none of the same shape."""
    ratio = largest = None
    for name in only or candidate:
        if name not in stages or name not in candidate or name not in atols:
            continue
        expected, _ = _align(name, candidate[name], stages[name], batch)
        if expected is None:
            continue
        with np.errstate(all="ignore"):
            error = np.abs(candidate[name] - expected)
            scaled = error / (atols[name] + rtol * np.abs(expected)) if rtol else error
        ratio = max(ratio or 0.0, worst(scaled) / (1 if rtol else atols[name]))
        largest = max(largest or 0.0, worst(error))
    return None if ratio is None else (ratio, largest)


def worst(values: np.ndarray) -> float:
    """The largest value, inf where one is NaN (a candidate's NaN fits nothing)."""
    largest = float(values.max(initial=0))
    return np.inf if largest != largest else largest


# --- forms of the output that no mutant computes ------------------------------------------------


def dropout(candidate: dict, case: Case, atols: dict) -> dict | None:
    """Dropout left on at inference: a share p of the output's values exactly 0, the rest the
    reference's times 1 / (1 - p)."""
    values = candidate.get("embeddings")
    if values is None or case.config.family.dropout_after != "embeddings":
        return None
    reference, _ = _align("embeddings", values, case.reference["embeddings"])
    if reference is None:
        return None
    nonzero = reference != 0
    zeros = (values == 0) & nonzero
    share = zeros.sum() / max(nonzero.sum(), 1)
    if not DROPOUT_SHARE[0] <= share <= DROPOUT_SHARE[1]:
        return None
    kept = nonzero & ~zeros
    scale = float(np.median(values[kept] / reference[kept]))
    p = 1 - 1 / scale if scale > 1 else 0.0
    residual = float(np.abs(values[kept] - reference[kept] * scale).max())
    if abs(p - share) > max(0.02, 0.2 * p) or residual > 2 * scale * atols["embeddings"]:
        return None
    return {
        "name": "dropout_left_on",
        "says": f"matches the reference with dropout left on (p {p:.2g}: {share:.1%} of the "
        f"values are 0, the rest {scale:.4g} times the reference's, max |diff| "
        f"{residual:.2g}): run the model in inference mode, where dropout passes its input "
        "through",
        "residual": residual,
        "value": round(p, 3),
        "within": True,
        "misfit": residual / atols["embeddings"],
    }


POOLS = {
    "mean over the real tokens": lambda rows, mask: masked_mean(rows, mask),
    "mean over every token": lambda rows, mask: rows.mean(axis=-2),
    "first token ([CLS])": lambda rows, mask: rows[..., 0, :],
    "largest value over the real tokens": lambda rows, mask: np.where(
        mask[..., None] != 0, rows, -np.inf
    ).max(axis=-2),
}


def masked_mean(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """rows (..., L, H) averaged over the tokens where mask (..., L) is 1 -> (..., H)."""
    weights = mask[..., None].astype(np.float64)  # (..., L, 1)
    return (rows * weights).sum(axis=-2) / np.maximum(weights.sum(axis=-2), 1)


def pooled(candidate: dict, case: Case, atols: dict) -> dict | None:
    """One vector per text where the layer gives a row per token: a pooling of the output."""
    for name in ("embeddings", "projected"):
        values, rows = candidate.get(name), case.reference.get(name)
        if values is None or rows is None or not one_per_text(values.shape, rows.shape):
            continue
        mask = np.ones(rows.shape[:-1]) if case.mask is None else case.mask
        for pool, of in POOLS.items():
            with np.errstate(all="ignore"):
                error = np.abs(values - of(rows, mask).reshape(values.shape))
            residual = float(np.nan_to_num(error, nan=np.inf).max())
            if residual <= atols[name]:
                return {
                    "name": "pooled",
                    "says": f"matches one vector per text, the {pool} of the reference's rows "
                    f"(max |diff| {residual:.2g}): the layer gives one row per token; a "
                    "sentence embedding pools the encoder's last layer, not its input",
                    "residual": residual,
                    "value": pool,
                    "within": True,
                    "misfit": residual / atols[name],
                }
    return None


def one_per_text(shape: tuple, rows: tuple) -> bool:
    """Whether `shape` is one vector per sequence of `rows`' (..., L, H): (..., H), or (H,)
    for a batch of one."""
    return shape == rows[:-2] + rows[-1:] or (
        len(rows) == 3 and rows[0] == 1 and shape == rows[-1:]
    )


# The bits of a float16's and a bfloat16's significand, and their least step: a value rounded
# to one is within one step of the reference rounded to it.
SIGNIFICANDS = {"float16": (10, 2.0**-24), "bfloat16": (7, 2.0**-133)}


def precision(candidate: dict, case: Case, atols: dict) -> dict | None:
    """An output whose every value is a float16 or bfloat16 number: the float32 output rounded
    to it (each value within a step of the reference rounded), or computed in it (its values
    spread about the reference as a port's computing each step in it do: rounding errors are
    not reproduced value for value)."""
    name = next((key for key in ("projected", "embeddings") if key in candidate), None)
    values = candidate.get(name)
    reference, _ = (None, None) if name is None else _align(name, values, case.reference[name])
    if reference is None:
        return None
    narrow, _ = _narrow(values, reference)
    if narrow is None:
        return None
    bits, least = SIGNIFICANDS[narrow]
    rounded = ROUNDINGS[narrow](reference).astype(np.float64)
    residual = float(np.abs(values - rounded).max())
    step = np.maximum(np.abs(reference) * 2.0**-bits, least)  # at most one step of it
    if (np.abs(values - rounded) <= step + atols[name]).all():  # from float32's output
        cost = float(np.abs(rounded - reference).max())  # what the rounding alone costs
        what = f"the output rounded to {narrow}, which alone puts it {cost:.3g} from the reference"
        fix, ratio = "return float32, or hold it to a tolerance of that", 0.5
    else:
        computed = narrow_computation(case, ROUNDINGS[narrow])
        spread = rms(values - reference) / rms(computed[name] - reference)
        if not 0.25 <= spread <= 4:
            return None
        what, fix, ratio = f"every step computed in {narrow}", "compute in float32", spread
        residual = float(np.abs(values - reference).max())
    return {
        "name": "output_narrowed" if ratio == 0.5 else "computed_narrow",
        "says": f"matches the reference with {what} (max |diff| {residual:.2g}): {fix}",
        "residual": residual,
        "value": narrow,
        "within": ratio == 0.5,
        "misfit": ratio,
    }


def rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values)))) or np.finfo(np.float64).tiny


FORMS = (dropout, pooled, precision)


def diagnosis_of(report: dict, candidate: dict, reference64: dict, context: dict) -> list[dict]:
    """compare's diagnosis: [] for a candidate that passes, or where compare was not given
    the weights and the reference's input_ids to recompute the layer from; else diagnose's,
    and where an entry reproduces the candidate within tolerance, it stands for the notes of
    the stages that fail (guesses it makes exact). context: compare's weights, inputs,
    mask (its attention_mask), atols, rtol and batch."""
    weights, inputs = context["weights"], context["inputs"] or {}
    if report["ok"] or weights is None or inputs.get("input_ids") is None:
        return []
    case = make_case(weights, inputs, context["mask"], reference64)
    if case is None:
        return []
    found = diagnose(candidate, case, context["atols"], context["rtol"], context["batch"])
    if any(entry["within"] for entry in found):
        for stage in report["stages"].values():
            if not stage["ok"] and "max_abs" in stage:
                stage.pop("notes", None)
    return found


def make_case(weights, inputs: dict, mask, reference64: dict) -> Case | None:
    """The Case of compare's arguments; None where the inputs are not ones the layer takes."""
    layer_mask = inputs.get("attention_mask")
    if weights.config.family.masks_padding and layer_mask is None:
        layer_mask = mask
    try:
        used = prepare_inputs(
            weights.config,
            inputs["input_ids"],
            inputs.get("token_type_ids"),
            inputs.get("position_ids"),
            layer_mask if weights.config.family.masks_padding else None,
        )
    except InputError:
        return None
    return Case(weights, used.input_ids, used.token_type_ids, used.position_ids,
                used.attention_mask, mask, reference64)  # fmt: skip
