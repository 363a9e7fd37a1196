"""Reading .npy and .npz files that come from outside: ids files and compare's candidates.

Never unpickled (allow_pickle=False), and every array's header is checked against the bytes
that follow it before NumPy allocates anything: a 145-byte .npy can claim 10^11 elements,
and np.load would try to allocate all of them before finding the data missing.
"""

import lzma
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from npbert.errors import InputError

# NumPy's public header readers by format version. Version 3.0 only adds UTF-8 field names
# of structured dtypes, which no array of ids or embeddings has: it is refused.
HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}
ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")  # how np.load tells an .npz, an empty one too
# What zipfile raises for a member it cannot give back: a damaged archive, an encrypted
# member (RuntimeError), a compression method it lacks (NotImplementedError), damaged
# compressed data (zlib's, lzma's, bz2's OSError).
ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    lzma.LZMAError,
    OSError,
    EOFError,
)


def check_header(stream: BinaryIO, size: int, where: str) -> None:
    """The array a .npy stream's header describes must be the stream's `size` bytes past
    it, no fewer and no more (as np.save writes it). Leaves the stream past the header."""
    try:
        version = np.lib.format.read_magic(stream)
        if version not in HEADER_READERS:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
        shape, _, dtype = HEADER_READERS[version](stream)
    except (ValueError, EOFError) as error:
        raise InputError(f"{where}: not a readable .npy array ({error})") from None
    if dtype.hasobject:  # its data is a pickle, not its elements: the size says nothing
        raise InputError(
            f"{where}: an array of Python objects, stored as a pickle, which npbert never "
            "loads; save numbers (array.astype(np.int64) for ids, float32 for embeddings)"
        )
    if any(n < 0 for n in shape):
        raise InputError(f"{where}: its header's shape {shape} has a negative length: not an array")
    if dtype.itemsize == 0:  # 0 bytes fit in any file, but NumPy still allocates per element
        raise InputError(f"{where}: its dtype {dtype} has no bytes per element: not an array")
    needed = math.prod(shape) * dtype.itemsize
    available = size - stream.tell()
    if needed != available:  # more than it says: a header of the wrong shape, the rest dropped
        raise InputError(
            f"{where}: its header describes a {shape} {dtype} array of {needed:,} bytes, but "
            f"{'only ' if needed > available else ''}{available:,} bytes follow the header"
        )


def regular_file(path: str | os.PathLike, where: str) -> Path:
    """path, if it is a file: a directory, a FIFO (which would be waited on) or a device is
    refused by name."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{where} {path} is a directory: give a file")
    if path.exists() and not path.is_file():
        raise InputError(f"{where} {path}: not a regular file")
    return path


def given_file(path: str | os.PathLike, where: str) -> Path:
    """path, a regular file that exists, named by `where` (an option) if not."""
    path = regular_file(path, where)
    if not path.exists():
        raise InputError(f"{where} {path}: no such file")
    return path


def load_npy(path: str | os.PathLike, where: str) -> np.ndarray:
    """One array from a .npy file, after checking its header against the file's size."""
    path = given_file(path, where)
    with open(path, "rb") as f:
        if f.read(4) in ZIP_STARTS:
            raise InputError(f"{where} {path}: an .npz archive; give one array as .npy")
        f.seek(0)
        check_header(f, os.fstat(f.fileno()).st_size, f"{where} {path}")
        f.seek(0)
        return _load(f, f"{where} {path}")


def load_npz(path: str | os.PathLike, where: str) -> dict[str, np.ndarray]:
    """Every array of an .npz archive, by name, after checking each header against the size
    the archive gives its member."""
    path = given_file(path, where)
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                with archive.open(member) as stream:
                    check_header(stream, member.file_size, f"{where} {path}: {member.filename}")
    except ARCHIVE_ERRORS as error:
        raise InputError(f"{where} {path}: not a readable .npz archive ({error})") from None
    with open(path, "rb") as f, _load(f, f"{where} {path}") as archive:
        return {key: _read(archive, key, f"{where} {path}") for key in archive.files}


def _load(f: BinaryIO, where: str):
    try:
        return np.load(f, allow_pickle=False)
    except (ValueError, EOFError, MemoryError) as error:  # e.g. object arrays need pickle
        raise InputError(f"{where}: not a readable .npy array ({error})") from None


def _read(archive, key: str, where: str) -> np.ndarray:
    try:
        return archive[key]
    except (ValueError, MemoryError, *ARCHIVE_ERRORS) as error:
        raise InputError(f"{where}: '{key}' is not a readable array ({error})") from None
