"""npbert.header refuses exactly the safetensors files the safetensors library refuses."""

import json
import re

import pytest
from conftest import TINY
from safetensors import SafetensorError, safe_open

from npbert.errors import InputError
from npbert.header import parse_header, read_file_header, require_floats

RAW = (TINY / "model.safetensors").read_bytes()
LENGTH = int.from_bytes(RAW[:8], "little")
WORD = "bert.embeddings.word_embeddings.weight"  # F32 (87, 32) at [17920, 29056)
LAST = "bert.encoder.layer.0.attention.self.value.weight"  # ends the data buffer


def entry(name, **changes):
    def change(header):
        header[name].update(changes)

    return change


def drop(name):
    return lambda header: header.pop(name)


CASES = {  # a change to TINY's header (None: none) and the data buffer's length change
    "as stored": (None, 0),
    "reversed offsets": (entry(WORD, data_offsets=[29056, 17920]), 0),
    "shape not matching bytes": (entry(WORD, shape=[87, 33]), 0),
    "F16 label on F32 bytes": (entry(WORD, dtype="F16"), 0),
    "I32 of the same size": (entry(WORD, dtype="I32"), 0),
    "F64 of the same size": (entry(WORD, dtype="F64", shape=[87, 16]), 0),
    "unknown dtype": (entry(WORD, dtype="F12"), 0),
    "overlapping": (entry(WORD, data_offsets=[17664, 28800]), 0),
    "a gap": (drop(WORD), 0),
    "bytes past the last tensor": (None, 16),
    "truncated": (None, -16),
    "offsets past the end": (entry(LAST, data_offsets=[42112, 46224]), 0),
    "sub-byte dtype, whole bytes": (entry(WORD, dtype="F4", shape=[87, 256]), 0),
    "sub-byte dtype, half a byte": (entry(WORD, dtype="F4", shape=[22271]), 0),
    "metadata not strings": (lambda header: header.update(__metadata__={"a": 1}), 0),
    "negative shape": (entry(WORD, shape=[-87, -32]), 0),
    "missing shape": (lambda header: header[WORD].pop("shape"), 0),
}


def write(path, change, extra: int) -> None:
    """TINY's file with its header changed and its data buffer longer or shorter by extra."""
    header = json.loads(RAW[8 : 8 + LENGTH])
    if change is not None:
        change(header)
    text = json.dumps(header).encode()
    data = RAW[8 + LENGTH :]
    data = data + b"\0" * extra if extra >= 0 else data[:extra]
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_refuses_what_safetensors_refuses_and_nothing_else(tmp_path, case):
    path = tmp_path / "model.safetensors"
    write(path, *CASES[case])
    try:
        with safe_open(path, framework="numpy"):
            pass
        library_refuses = False
    except SafetensorError:
        library_refuses = True
    try:
        read_file_header(path)
        npbert_refuses = False
    except InputError as error:
        npbert_refuses = True
        assert str(path) in str(error) and "\n" not in str(error)
    assert npbert_refuses == library_refuses


def test_the_header_gives_each_tensors_place_and_the_data_start():
    data_start, tensors = read_file_header(TINY / "model.safetensors")
    assert data_start == 8 + LENGTH
    assert tensors[WORD].dtype == "F32" and tensors[WORD].shape == (87, 32)
    assert tensors[WORD].data_offsets == (17920, 29056) and tensors[WORD].nbytes == 11136


def test_only_float_tensors_are_read():
    header = json.loads(RAW[8 : 8 + LENGTH])
    header[WORD]["dtype"] = "I32"
    tensors = parse_header(json.dumps(header).encode(), len(RAW) - 8 - LENGTH, "here")
    require_floats(tensors, ["bert.embeddings.LayerNorm.beta"], "here")
    with pytest.raises(InputError, match=re.escape(f"here: {WORD} is I32")):
        require_floats(tensors, [WORD], "here")


@pytest.mark.parametrize(
    "raw",
    [b"[]", b"{", b"\xff", b'{"x": 1}', b'{"x": ' + b"9" * 5000 + b"}", b"[" * 100_000],
    ids=["list", "cut", "not UTF-8", "not an entry", "huge integer", "deep"],
)
def test_a_header_that_is_not_an_object_of_entries_is_refused(raw):
    with pytest.raises(InputError, match=r"^here: "):
        parse_header(raw, 0, "here")
