"""Checks on the inputs before any lookup, and the family's defaults for what is not given.

NumPy indexing would wrap a negative id to a row from the end, and read an array of bools as a
mask (other rows, another shape), so every id is checked first. Each check raises InputError
naming the value and where it is, e.g.
"input_ids[1, 4] = -1 is out of range: word_embeddings has 30522 rows (ids 0..30521)".
"""

import operator
import os
import sys
from typing import NamedTuple

import numpy as np

from npbert.errors import InputError
from npbert.layer.config import positions_in
from npbert.layer.embedding import absolute_position_ids, padded_position_ids


class Inputs(NamedTuple):  # immutable, and made in a third of a frozen dataclass's time
    """Validated inputs of one call as intp arrays, the family's defaults filled in. Shapes as
    given: (B, L), or (L,) for one sequence. A tuple of arrays: compare fields, not Inputs."""

    input_ids: np.ndarray  # (..., L)
    token_type_ids: np.ndarray | None  # (..., L); None where the family has no token-type table
    position_ids: np.ndarray | None  # (L,) shared by the batch, or (B, L); None without a table
    attention_mask: np.ndarray | None  # (..., L) of 0 and 1; None: every token is real
    positions_from_zero: bool = False  # position_ids are the default 0..L-1 of each sequence


def shown(value, limit: int = 60) -> str:
    """repr(value) for an error message, cut at `limit` characters: a list of a million texts
    given for a path would make a message of 49 MB."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails would replace the error being made
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else f"{text[:limit]}... ({type(value).__name__})"


def check_count(name: str, value) -> int:
    """A whole number of at least 1 (a Python or NumPy integer, not a bool, not 1.0), as
    threads, workers, batch sizes and lengths are, as an int; or InputError."""
    try:
        number = None if isinstance(value, bool | np.bool_) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < 1:
        raise InputError(f"{name} must be a whole number of at least 1, got {shown(value)}")
    return number


def check_flag(name: str, value) -> bool:
    """True or False (a NumPy bool too), as project and truncation are, or InputError: a
    string such as "no" is true, and would do what the caller said not to."""
    if not isinstance(value, bool | np.bool_):
        raise InputError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def check_path(name: str, value) -> str:
    """A path given as a str or an os.PathLike of one, as a str, or InputError (os.fspath's
    TypeError would not say which argument it was)."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise InputError(f"{name} must be a path (a str or os.PathLike), got {shown(value)}")
    return path


def indexed(name: str, index: tuple) -> str:
    """Where a value is, as errors name it: "input_ids[1, 4]"."""
    return f"{name}[{', '.join(str(int(i)) for i in index)}]"


def as_id_array(name: str, ids) -> np.ndarray:
    """ids (array-like) -> an integer ndarray of ndim 1 or 2, or InputError."""
    refuse_masked(name, ids)
    try:
        array = np.asarray(ids)
    except ValueError as error:  # ragged nested lists
        raise InputError(f"{name} is not a rectangular array: {error}") from None
    except TypeError as error:  # an array-like NumPy cannot read (its __array__ fails)
        raise InputError(f"{name} must be an array of integer ids: {error}") from None
    if array.dtype == object and array.ndim == 0:  # None, a dict, a set, a generator
        raise InputError(f"{name} must be an array of integer ids, got {shown(ids)}")
    if array.size == 0:
        raise InputError(f"{name} is empty (shape {array.shape}): nothing to embed")
    if array.dtype.kind == "f" and not isinstance(ids, np.ndarray):
        array = _mixed_integers(name, ids, array)
    if array.dtype == object:  # Python ints past int64 among them, perhaps
        refuse_huge(name, array)
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f":
            bad = ~np.isfinite(array) | (array != np.round(array))
            if bad.any():
                index = tuple(np.argwhere(bad)[0])
                raise InputError(f"{indexed(name, index)} = {array[index]} is not an integer id")
        raise InputError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise InputError(f"{name} must have shape (L,) or (B, L), got {array.shape}")
    if not isinstance(ids, np.ndarray) and array.min() <= 1 and _holds_bool(ids):
        flat = np.array(_as_numpy(ids), dtype=object)  # (B, L) or (L,), only to say where
        index = tuple(np.argwhere(np.frompyfunc(_is_bool, 1, 1)(flat).astype(bool))[0])
        raise InputError(f"{indexed(name, index)} = {flat[index]} is a bool, not an integer id")
    return array


def _mixed_integers(name: str, ids, array: np.ndarray) -> np.ndarray:
    """NumPy makes a list of np.uint64 and int ids float64 (no integer type holds both): as
    int64 where every entry is an integer, else the float array, refused by the caller."""
    flat = np.array(ids, dtype=object)
    if not all(isinstance(v, int | np.integer) for v in flat.flat):
        return array
    refuse_huge(name, flat)
    return flat.astype(np.int64)


def refuse_huge(name: str, values: np.ndarray) -> None:
    """InputError naming the first of an object array's integers that int64 cannot hold."""
    huge = np.frompyfunc(_huge, 1, 1)(values).astype(bool)
    if huge.any():
        index = tuple(np.argwhere(huge)[0])
        raise InputError(f"{indexed(name, index)} = {values[index]} is out of range of any table")


def _huge(value) -> bool:
    return isinstance(value, int | np.integer) and not -(2**63) <= value < 2**63


def _is_bool(value) -> bool:
    """A bool, or an array of bools of any library (NumPy, torch, pyarrow, pandas)."""
    if isinstance(value, bool | np.bool_):
        return True
    return not isinstance(value, int | np.integer) and np.asarray(value).dtype.kind == "b"


def _holds_bool(values) -> bool:
    """Whether nested lists hold a bool: np.asarray takes True for 1 among ints, so the
    array cannot tell, also of a list of torch tensors or pyarrow arrays. Only lists whose ids
    include 0 or 1 are searched."""
    if not isinstance(values, list | tuple):
        return _is_bool(values)
    kinds = set(map(type, values))  # one pass in C over a row of ints (or np.int64s)
    if kinds & {bool, np.bool_}:
        return True
    nested = {kind for kind in kinds if not issubclass(kind, int | np.integer)}
    return bool(nested) and any(_holds_bool(v) for v in values if type(v) in nested)


def _as_numpy(values):
    """Nested lists with each other array-like as NumPy's, which keeps its bools as bools."""
    if isinstance(values, list | tuple):
        return [_as_numpy(v) for v in values]
    return values if isinstance(values, int | np.generic) else np.asarray(values)


def refuse_masked(name: str, values) -> None:
    """np.asarray drops a masked array's mask and keeps what lies under it: refused. (No
    masked array exists before numpy.ma is imported, and importing it costs a cold start.)"""
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(values, ma.MaskedArray) and ma.is_masked(values):
        raise InputError(f"{name} is a masked array with masked entries: give plain values")


def check_range(name: str, ids: np.ndarray, table: str, rows: int) -> np.ndarray:
    """Every id in [0, rows), else InputError naming the first one that is not."""
    # One pass: seen as unsigned, a negative id is past every table (-1 is 2**64 - 1).
    unsigned = ids if ids.dtype.kind == "u" else ids.astype(np.intp, copy=False).view(np.uintp)
    if unsigned.max() >= rows:
        bad = (ids < 0) | (ids >= rows)
        index = tuple(np.argwhere(bad)[0])
        value = int(ids[index])
        why = " (NumPy would silently wrap it to a row from the end)" if value < 0 else ""
        raise InputError(
            f"{indexed(name, index)} = {value} is out of range{why}: "
            f"{table} has {rows} rows (ids 0..{rows - 1})"
        )
    return ids.astype(np.intp, copy=False)


def _same_shape(name: str, array: np.ndarray, input_ids: np.ndarray) -> np.ndarray:
    if array.shape != input_ids.shape:
        raise InputError(f"{name} has shape {array.shape}, but input_ids has {input_ids.shape}")
    return array


def _absent(name: str, config, table: str) -> InputError:
    return InputError(
        f"{name} given, but {config.model_type} has no {table} table: its embedding layer "
        f"takes none ({config.formula})"
    )


def prepare_inputs(config, input_ids, token_type_ids, position_ids, attention_mask) -> Inputs:
    """Validate the inputs against an EmbeddingConfig and fill in the family's defaults:
    token types 0, positions 0..L-1 or RoBERTa's, no mask. input_ids (L,) or (B, L); the
    others the same shape, but position_ids may be (L,) for the whole batch."""
    ids = as_id_array("input_ids", input_ids)
    ids = check_range("input_ids", ids, "word_embeddings", config.vocab_size)
    mask = check_mask(attention_mask, ids)
    if config.mask_token_id is not None:
        check_token_dropout(config.mask_token_id, ids, mask)
    return Inputs(
        ids,
        _token_types(config, ids, token_type_ids),
        _positions(config, ids, position_ids),
        mask,
        position_ids is None and config.positions == "absolute" and not config.position_offset,
    )


def check_token_dropout(mask_token_id: int, input_ids, attention_mask) -> None:
    """InputError where ESM's token dropout would divide by 1 - (the share of <mask> tokens)
    <= 0: a sequence whose tokens (those the attention mask counts) are all <mask>."""
    length = input_ids.shape[-1]
    counted = length if attention_mask is None else attention_mask.sum(-1)
    counted = np.broadcast_to(counted, input_ids.shape[:-1])  # (B,) or ()
    masked = (input_ids == mask_token_id).sum(-1)  # (B,) or ()
    bad = np.argwhere(masked >= counted)
    if len(bad):
        row = tuple(int(i) for i in bad[0])
        where = f"input_ids[{row[0]}]" if row else "input_ids"
        raise InputError(
            f"{where} has {masked[row]} <mask> tokens (id {mask_token_id}) among its "
            f"{counted[row]} counted tokens: ESM's token dropout divides by 1 - their share, "
            "which must be above 0"
        )


def _token_types(config, input_ids, token_type_ids) -> np.ndarray | None:
    if config.type_vocab_size == 0:
        if token_type_ids is not None:
            raise _absent("token_type_ids", config, "token-type")
        return None
    if token_type_ids is None:
        return np.zeros_like(input_ids)
    types = _same_shape("token_type_ids", as_id_array("token_type_ids", token_type_ids), input_ids)
    return check_range("token_type_ids", types, "token_type_embeddings", config.type_vocab_size)


def _positions(config, input_ids, position_ids) -> np.ndarray | None:
    length = input_ids.shape[-1]
    if config.positions == "none":
        if position_ids is not None:
            raise _absent("position_ids", config, "position")
        return None
    if position_ids is None:
        positions = own_position_ids(config, input_ids)
        _check_fits(config, positions)
        return positions
    positions = as_id_array("position_ids", position_ids)
    if positions.shape not in ((length,), input_ids.shape):
        shapes = f"({length},)" + (f" or {input_ids.shape}" if input_ids.ndim == 2 else "")
        raise InputError(
            f"position_ids has shape {positions.shape}; it must be {shapes} like input_ids"
        )
    rows = config.max_position_embeddings
    return check_range("position_ids", positions, "position_embeddings", rows)


def own_position_ids(config, input_ids: np.ndarray) -> np.ndarray | None:
    """The positions the family's model gives these ids when none are given: (L,), or (B, L)
    where they come from each sequence's padding; None where it has no position table."""
    if config.positions == "none":
        return None
    if config.positions == "padded":
        return padded_position_ids(input_ids, config.padding_idx)
    return absolute_position_ids(input_ids.shape[-1], config.position_offset)


def _check_fits(config, positions: np.ndarray) -> None:
    """InputError unless every sequence's tokens fit the model's limit: positions 0..L-1, or
    RoBERTa's, where padding takes none of it (rows padding_idx + 1 .. padding_idx + real)."""
    if config.positions != "padded":
        if len(positions) > config.max_length:
            raise InputError(f"input_ids has {len(positions)} tokens, more than {_limit(config)}")
        return
    real = int(positions.max()) - config.padding_idx  # the most real tokens a sequence has
    if real > config.max_length:
        where = np.unravel_index(np.argmax(positions), positions.shape)[:-1]
        raise InputError(
            f"{indexed('input_ids', where) if where else 'input_ids'} has {real} tokens that are "
            f"not padding, more than {_limit(config)}"
        )


def _limit(config) -> str:
    """What config.max_length is, for messages: the position table's rows, or a length set
    below them in code."""
    table = config.max_position_embeddings
    if config.max_length != positions_in(table, config.padding_idx, config.position_offset):
        return f"max_length ({config.max_length}, of a position table of {table} rows)"
    if config.position_offset:
        return (
            f"{config.model_type}'s positions allow ({config.max_length}: a table of {table} "
            f"rows, from row {config.position_offset})"
        )
    if config.padding_idx is None:
        return f"max_position_embeddings ({table})"
    return (
        f"{config.model_type}'s positions allow ({config.max_length}: "
        f"max_position_embeddings {table} - padding_idx {config.padding_idx} - 1)"
    )


def check_mask(attention_mask, input_ids: np.ndarray) -> np.ndarray | None:
    """attention_mask (or None) as an intp array the shape of input_ids, 1 for real tokens and
    0 for padding; else InputError."""
    if attention_mask is None:
        return None
    refuse_masked("attention_mask", attention_mask)
    try:
        mask = np.asarray(attention_mask)
    except ValueError as error:  # ragged nested lists
        raise InputError(f"attention_mask is not a rectangular array: {error}") from None
    if mask.dtype.kind not in "biuf":
        raise InputError(f"attention_mask must be an array of 0 and 1, got dtype {mask.dtype}")
    _same_shape("attention_mask", mask, input_ids)
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        index = tuple(np.argwhere(bad)[0])
        raise InputError(f"{indexed('attention_mask', index)} = {mask[index]} is not 0 or 1")
    return mask.astype(np.intp)
