"""A candidate's arrays, read from the files another implementation writes (.npy, .npz,
.safetensors, JSON) and checked as arrays of numbers of the reference's shapes.
"""

import json
import math
import os
from pathlib import Path

import numpy as np

from npbert.errors import InputError, first_line
from npbert.loading.npyfile import given_file, load_npy, load_npz
from npbert.verify.tolerances import INPUTS, METADATA, OUTPUT, OUTPUTS, STAGES


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
        raise InputError(f"candidate {error.message}") from None
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
            name, rounded = "bfloat16", to_bfloat16(reference)
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


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """values rounded to the nearest bfloat16 (ties to even), as float32: NumPy has no
    bfloat16, and this is how torch rounds float32 to it."""
    bits = values.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


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
