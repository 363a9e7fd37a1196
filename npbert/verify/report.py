"""The report for people: one line a stage, the output's details, the verdict."""

from npbert.verify.candidates import BATCH_AXIS
from npbert.verify.tolerances import DEFAULT_ATOL, OUTPUTS, STEPS


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
    lines += [f"  diagnosis: {entry['says']}" for entry in report.get("diagnosis", ())]
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
        f"{'it' if one else 'them'} too (an .npz of every stage, named as embed_stages names "
        "them) to find it"
    )
