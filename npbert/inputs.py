"""Checks on ids before any lookup: NumPy indexing would wrap negative ids and accept floats.

Each check raises InputError naming the offending value and where it is, e.g.
"input_ids[1, 4] = -1 is out of range: word_embeddings has 30522 rows (ids 0..30521)".
"""

import numpy as np

from npbert.errors import InputError


def _where(name: str, index: tuple) -> str:
    return f"{name}[{', '.join(str(int(i)) for i in index)}]"


def as_id_array(name: str, ids) -> np.ndarray:
    """ids (array-like) -> an integer ndarray of ndim 1 or 2, or InputError."""
    try:
        array = np.asarray(ids)
    except ValueError as error:  # ragged nested lists
        raise InputError(f"{name} is not a rectangular array: {error}") from None
    if array.size == 0:
        raise InputError(f"{name} is empty (shape {array.shape}): nothing to embed")
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f":
            bad = ~np.isfinite(array) | (array != np.round(array))
            if bad.any():
                index = tuple(np.argwhere(bad)[0])
                raise InputError(f"{_where(name, index)} = {array[index]} is not an integer id")
        raise InputError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise InputError(f"{name} must have shape (L,) or (B, L), got {array.shape}")
    return array


def check_range(name: str, ids: np.ndarray, table: str, rows: int) -> np.ndarray:
    """Every id in [0, rows), else InputError naming the first one that is not."""
    bad = (ids < 0) | (ids >= rows)
    if bad.any():
        index = tuple(np.argwhere(bad)[0]) if ids.ndim else ()
        value = int(ids[index])
        why = " (NumPy would silently wrap it to a row from the end)" if value < 0 else ""
        raise InputError(
            f"{_where(name, index)} = {value} is out of range{why}: "
            f"{table} has {rows} rows (ids 0..{rows - 1})"
        )
    return ids.astype(np.intp, copy=False)


def prepare_ids(
    input_ids,
    token_type_ids,
    position_ids,
    *,
    vocab_size: int,
    type_vocab_size: int,
    max_positions: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate ids and fill defaults: token types all 0, positions 0..L-1.

    input_ids (L,) or (B, L); token_type_ids the same shape; position_ids (L,) or the same
    shape as input_ids. Returns (input_ids, token_type_ids, position_ids) as intp arrays.
    """
    input_ids = as_id_array("input_ids", input_ids)
    length = input_ids.shape[-1]
    if length > max_positions:
        raise InputError(
            f"input_ids has {length} tokens, more than max_position_embeddings ({max_positions})"
        )
    input_ids = check_range("input_ids", input_ids, "word_embeddings", vocab_size)

    if token_type_ids is None:
        token_type_ids = np.zeros_like(input_ids)
    token_type_ids = as_id_array("token_type_ids", token_type_ids)
    if token_type_ids.shape != input_ids.shape:
        raise InputError(
            f"token_type_ids has shape {token_type_ids.shape}, "
            f"but input_ids has shape {input_ids.shape}"
        )
    token_type_ids = check_range(
        "token_type_ids", token_type_ids, "token_type_embeddings", type_vocab_size
    )

    if position_ids is None:
        position_ids = np.arange(length)
    position_ids = as_id_array("position_ids", position_ids)
    if position_ids.shape not in ((length,), input_ids.shape):
        raise InputError(
            f"position_ids has shape {position_ids.shape}; "
            f"it must be ({length},) or {input_ids.shape} like input_ids"
        )
    position_ids = check_range("position_ids", position_ids, "position_embeddings", max_positions)
    return input_ids, token_type_ids, position_ids
