"""npbert.loading.header refuses the safetensors files whose header would misplace or misstate a
tensor, as the safetensors library does; JSON the library's parser is stricter about, which
leaves every entry well-formed, it may take."""

import json
import re

import pytest
from conftest import TINY
from safetensors import SafetensorError, safe_open

from npbert.errors import InputError
from npbert.loading.header import parse_header, read_file_header, require_floats

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


def text(change):
    """A change to the header's JSON text, for what json.dumps does not write."""
    return lambda header: change(json.dumps(header).encode())


def in_word(inserted: bytes):
    """The header's text with `inserted` first in WORD's entry."""
    opening = f'"{WORD}": {{'.encode()
    return text(lambda raw: raw.replace(opening, opening + inserted, 1))


def nested(levels: int) -> bytes:
    """An extra field of WORD whose value is arrays `levels` deep: with the header and the
    entry, levels + 2 in all."""
    return b'"x": ' + b"[" * levels + b"]" * levels + b", "


def zero_sized(*shape):
    """An F32 tensor of no bytes, at the start of the buffer, of that shape."""
    tensor = {"dtype": "F32", "shape": list(shape), "data_offsets": [0, 0]}
    return lambda header: header.update(z=tensor)


def first_given(name: str, entry: bytes):
    """The header with an entry for `name` before its own: two of one key."""
    return text(lambda raw: b'{"' + name.encode() + b'": ' + entry + b", " + raw[1:])


def zero_sized_text(fields: bytes):
    """An F32 tensor of no bytes whose shape and offsets are `fields`, as JSON text."""
    return text(lambda raw: b'{"z": {"dtype": "F32", ' + fields + b"}, " + raw[1:])


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
    # as Rust's serde_json reads JSON, and safetensors' own struct of a header
    "metadata null": (lambda header: header.update(__metadata__=None), 0),
    "metadata a list": (lambda header: header.update(__metadata__=[]), 0),
    "metadata given twice": (text(lambda raw: raw[:-1] + b', "__metadata__": {}}'), 0),
    "an extra field": (entry(WORD, extra={"any": [1, None]}), 0),
    "an extra field given twice": (in_word(b'"x": 1, "x": 2, '), 0),
    "a field given twice": (in_word(b'"dtype": "F32", '), 0),
    "a tensor given twice": (text(lambda raw: raw[:-1] + b", " + raw[1:]), 0),
    "a UTF-8 byte-order mark": (text(lambda raw: b"\xef\xbb\xbf" + raw), 0),
    "UTF-16": (text(lambda raw: raw.decode().encode("utf-16")), 0),
    "a NUL after the JSON": (text(lambda raw: raw + b"\0"), 0),
    "NaN": (in_word(b'"x": NaN, '), 0),
    "Infinity": (in_word(b'"x": -Infinity, '), 0),
    "a float past float64": (in_word(b'"x": 1e400, '), 0),
    "an integer past float64": (in_word(b'"x": ' + b"9" * 309 + b", "), 0),
    "an integer within float64": (in_word(b'"x": ' + b"9" * 308 + b", "), 0),
    "an unpaired surrogate escape": (in_word(b'"x": "\\ud800", '), 0),
    "a surrogate pair escape": (in_word(b'"x": "\\ud83d\\ude00", '), 0),
    "nested 127 levels": (in_word(nested(125)), 0),
    "nested 128 levels": (in_word(nested(126)), 0),
    "shape within u64": (zero_sized(0, 2**64 - 1), 0),
    "shape past u64": (zero_sized(0, 2**64), 0),
    "elements past u64 before a 0": (zero_sized(2**40, 2**40, 0), 0),
    "elements past u64 after a 0": (zero_sized(0, 2**40, 2**40), 0),
    # found by fuzzing the Hub's path, which has only this check: a traceback, or taken
    "dtype a list": (entry(WORD, dtype=["F32"]), 0),
    "dtype an object": (entry(WORD, dtype={"a": 1}), 0),
    "a tensor given twice, the first malformed": (first_given(WORD, b'{"bogus": 1}'), 0),
    "a tensor given twice, the first of another size": (
        first_given(WORD, b'{"dtype": "F32", "shape": [1], "data_offsets": [0, 999]}'),
        0,
    ),
    "a shape of -0": (zero_sized_text(b'"shape": [-0], "data_offsets": [0, 0]'), 0),
    "data_offsets of -0": (zero_sized_text(b'"shape": [0], "data_offsets": [-0, 0]'), 0),
}


def write(path, change, extra: int) -> None:
    """TINY's file with its header changed and its data buffer longer or shorter by extra."""
    header = json.loads(RAW[8 : 8 + LENGTH])
    changed = None if change is None else change(header)
    raw = changed if isinstance(changed, bytes) else json.dumps(header).encode()
    data = RAW[8 + LENGTH :]
    data = data + b"\0" * extra if extra >= 0 else data[:extra]
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


# What safetensors' parser (Rust's serde_json) refuses and Python's json reads, where every
# tensor's entry still says where its bytes are and what they hold.
LENIENT = {
    "NaN", "Infinity", "a float past float64", "an integer past float64",
    "an unpaired surrogate escape", "nested 128 levels", "a field given twice",
    "a tensor given twice", "a tensor given twice, the first malformed", "metadata given twice",
    "a shape of -0", "data_offsets of -0",
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_refuses_what_safetensors_refuses_but_json_its_parser_alone_refuses(tmp_path, case):
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
    assert npbert_refuses == library_refuses or (case in LENIENT and library_refuses)


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
