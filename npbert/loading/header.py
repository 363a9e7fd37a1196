"""The safetensors header, validated as the safetensors library validates a file.

A safetensors file is 8 bytes of little-endian header length n, n bytes of JSON, then the data
buffer. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]},
offsets relative to the data buffer; an optional "__metadata__" maps strings to strings.

The checks are written here once, over the parsed JSON and the buffer's length, so that a
header served by the Hub (npbert.loading.hub) and a file on disk are held to the same rules, the
rules of the safetensors library itself: sorted by offset, the tensors cover the buffer
exactly (the first begins at 0, each begins where the one before ended, the last ends at the
buffer's end), and each tensor's bytes are its element count times its dtype's size.
safetensors checks this when it opens a file; the Hub path has only the header and the bytes it
asked for, so npbert checks the same before it trusts an offset.

The JSON must be UTF-8 and an object; its entries are held to the rules above, which is what
keeps a corrupt or lying header from moving an offset. Like safetensors, npbert takes fields of
an entry it does not know and a null __metadata__.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from npbert.errors import InputError
from npbert.loading.config import JSON_ERRORS, json_problem

MAX_HEADER_BYTES = 100_000_000  # safetensors refuses longer headers
U64 = 1 << 64  # shapes and offsets are Rust usizes
FIELDS = ("dtype", "shape", "data_offsets")
# Bits per element of every dtype safetensors knows.
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
FLOAT_DTYPES = ("F32", "F16", "BF16")  # what npbert reads embedding tensors from


@dataclass(frozen=True)
class TensorHeader:
    """One tensor's entry: dtype as safetensors spells it, shape, and [begin, end) in the
    data buffer."""

    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]


def header_length(prefix: bytes, file_size: int, where: str) -> int:
    """The header length n from a file's first 8 bytes, checked against the file's size."""
    if len(prefix) != 8 or file_size < 8:
        raise InputError(f"{where}: {file_size} bytes, too short for a safetensors file")
    length = int.from_bytes(prefix, "little")
    if length > MAX_HEADER_BYTES or 8 + length > file_size:
        raise InputError(
            f"{where}: the header claims {length:,} bytes in a file of {file_size:,} "
            f"(at most {MAX_HEADER_BYTES:,} and within the file)"
        )
    return length


def parse_header(raw: bytes, data_length: int, where: str) -> dict[str, TensorHeader]:
    """The header's JSON (n bytes) as tensor name -> TensorHeader, validated against a data
    buffer of data_length bytes (the file's size - 8 - n). Raises InputError naming `where`."""
    try:
        parsed = json.loads(raw.decode("utf-8"))  # from bytes, json would guess UTF-16
    except JSON_ERRORS as error:
        problem = json_problem(error)
        raise InputError(f"{where}: the safetensors header is not valid JSON ({problem})") from None
    if not isinstance(parsed, dict):
        raise InputError(f"{where}: the safetensors header is not a JSON object")
    metadata = parsed.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata  # null: none, as safetensors takes it
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InputError(f"{where}: __metadata__ must map strings to strings")
    return validate(parsed, data_length, where)


def validate(entries: dict, data_length: int, where: str) -> dict[str, TensorHeader]:
    """Parsed header entries (name -> {"dtype", "shape", "data_offsets"}) checked as
    safetensors checks a file: each entry well-formed, its byte length its shape times its
    dtype's size, and the entries, sorted by offset, covering [0, data_length) exactly."""
    tensors = {name: _entry(name, entry, where) for name, entry in entries.items()}
    position = 0
    for name, tensor in sorted(tensors.items(), key=lambda item: item[1].data_offsets):
        begin, end = tensor.data_offsets
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else "leaves a gap before it"
            raise InputError(f"{where}: {name} at bytes [{begin}, {end}) {what} (at {position})")
        position = end
    if position != data_length:
        raise InputError(
            f"{where}: the tensors cover {position:,} bytes of a data buffer of {data_length:,}"
        )
    return tensors


def _fields(name: str, entry, where: str) -> tuple[str, list, list]:
    """(dtype, shape, data_offsets) of one header entry, each of its type."""
    if not isinstance(entry, dict) or not set(FIELDS) <= set(entry):  # others are ignored
        raise InputError(f"{where}: {name} needs dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InputError(f"{where}: {name} has unknown dtype {dtype!r}")
    if not _naturals(shape) or not _naturals(offsets) or len(offsets) != 2:
        raise InputError(
            f"{where}: {name} needs a shape of integers >= 0 and two data_offsets, "
            f"got shape {shape!r}, data_offsets {offsets!r}"
        )
    return dtype, shape, offsets


def _entry(name: str, entry, where: str) -> TensorHeader:
    """One header entry as a TensorHeader, its offsets and size consistent in itself."""
    dtype, shape, offsets = _fields(name, entry, where)
    begin, end = offsets
    if end < begin:
        raise InputError(f"{where}: {name} has reversed data_offsets [{begin}, {end})")
    elements = 1
    for size in shape:  # safetensors multiplies in order, and refuses an overflow
        elements *= size
        if elements >= U64:
            raise InputError(f"{where}: {name} has shape {tuple(shape)}, too many elements")
    bits = elements * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise InputError(
            f"{where}: {name} is {dtype} of shape {tuple(shape)}, {bits / 8:g} bytes, but its "
            f"data_offsets hold {end - begin}"
        )
    return TensorHeader(dtype, tuple(shape), (begin, end))


def _naturals(values) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < U64 for v in values
    )


def require_floats(tensors: dict[str, TensorHeader], names: Iterable[str], where: str) -> None:
    """The tensors npbert reads must be float32, float16 or bfloat16."""
    for name in names:
        if tensors[name].dtype not in FLOAT_DTYPES:
            raise not_float(where, name, tensors[name].dtype)


def not_float(where, name: str, dtype: str) -> InputError:
    return InputError(
        f"{where}: {name} is {dtype}; npbert reads embedding tensors stored as "
        f"{', '.join(FLOAT_DTYPES)}"
    )


def read_file_header(path: Path, where: str = "") -> tuple[int, dict[str, TensorHeader]]:
    """(where the data buffer starts, tensor name -> TensorHeader) of a local safetensors file,
    validated against the file's size. Raises InputError for a damaged or truncated file,
    naming it as `where` (default: its path)."""
    size = path.stat().st_size
    where = where or str(path)
    with open(path, "rb") as f:
        length = header_length(f.read(8), size, where)
        raw = f.read(length)
    return 8 + length, parse_header(raw, size - 8 - length, where)
