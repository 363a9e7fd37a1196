"""The candidate's own inputs (input_ids, token_type_ids, position_ids, attention_mask),
checked value for value against the reference's before any stage.
"""

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import shown
from npbert.verify.tolerances import INPUTS


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
