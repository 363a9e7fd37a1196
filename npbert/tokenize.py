"""Text to ids with the tokenizers library: the checkpoint's tokenizer.json, else its vocab.txt.

A pair (A, B) becomes [CLS] A [SEP] B [SEP] with token_type_ids 0 for [CLS] A [SEP] and
1 for B [SEP]. Padding and truncation stored in tokenizer.json are ignored (all-MiniLM-L6-v2's
pads everything to 128): a batch is padded to its longest text, and a text longer than
max_position_embeddings is an error unless truncation is asked for.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.errors import InputError


@dataclass(frozen=True, eq=False)
class Encoding:
    """A tokenized batch, padded to its longest text. Arrays (B, L) int64."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list[list[str]]  # B lists of L tokens, [PAD] included


def load_tokenizer(directory: Path):
    """A tokenizers Tokenizer (or its BertWordPieceTokenizer), padding and truncation off."""
    tokenizer_json = directory / "tokenizer.json"
    vocab_txt = directory / "vocab.txt"
    if tokenizer_json.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_json))
    elif vocab_txt.is_file():
        from tokenizers import BertWordPieceTokenizer

        tokenizer = BertWordPieceTokenizer(str(vocab_txt), lowercase=_lowercase(directory))
    else:
        raise InputError(f"{directory} has neither tokenizer.json nor vocab.txt")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _lowercase(directory: Path) -> bool:
    """do_lower_case from tokenizer_config.json; BERT's uncased default when it is absent."""
    path = directory / "tokenizer_config.json"
    if path.is_file():
        return bool(json.loads(path.read_text(encoding="utf-8")).get("do_lower_case", True))
    return True


def _check_texts(name: str, texts: list) -> None:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{name}[{i}] is {type(text).__name__}, not a string")


def tokenize_batch(
    tokenizer,
    texts: list[str],
    pairs: list[str] | None = None,
    *,
    max_length: int,
    truncation: bool = False,
    pad_token_id: int | None = None,
    names: list[str] | None = None,
) -> list:
    """tokenizers Encodings of B texts (or B (text, pair) pairs), padded to the longest when
    pad_token_id is given. `names` label the texts in errors ("text 3", "input.txt line 9")."""
    if not texts:
        raise InputError("no text to embed")
    _check_texts("texts", texts)
    if pairs is not None:
        _check_texts("pairs", pairs)
        if len(pairs) != len(texts):
            raise InputError(f"{len(texts)} texts but {len(pairs)} pairs: give one pair per text")
    inputs = texts if pairs is None else list(zip(texts, pairs, strict=True))
    if truncation:
        tokenizer.enable_truncation(max_length=max_length)
    if pad_token_id is not None:
        pad_token = tokenizer.id_to_token(pad_token_id) or "[PAD]"
        tokenizer.enable_padding(pad_id=pad_token_id, pad_token=pad_token)
    try:
        encodings = tokenizer.encode_batch(inputs)
    finally:
        tokenizer.no_padding()
        tokenizer.no_truncation()
    for i, encoding in enumerate(encodings):
        length = sum(encoding.attention_mask)
        if length > max_length:
            name = names[i] if names else f"text {i}"
            raise InputError(
                f"{name} has {length} tokens, more than max_position_embeddings ({max_length}); "
                f"ask for truncation (truncation=True, --truncate) to keep the first {max_length}"
            )
    return encodings


def encode(
    tokenizer,
    texts: list[str],
    pairs: list[str] | None = None,
    *,
    max_length: int,
    pad_token_id: int,
    truncation: bool = False,
) -> Encoding:
    """Tokenize B texts (or B (text, pair) pairs) into ids padded to the longest, (B, L) each."""
    encodings = tokenize_batch(
        tokenizer,
        texts,
        pairs,
        max_length=max_length,
        truncation=truncation,
        pad_token_id=pad_token_id,
    )
    return Encoding(
        input_ids=np.array([e.ids for e in encodings], dtype=np.int64),
        token_type_ids=np.array([e.type_ids for e in encodings], dtype=np.int64),
        attention_mask=np.array([e.attention_mask for e in encodings], dtype=np.int64),
        tokens=[list(e.tokens) for e in encodings],
    )
