"""Text to ids with the tokenizers library: the checkpoint's tokenizer.json, else its vocab.txt.

Whatever the model (WordPiece, BPE, Unigram), the tokenizer's own post-processor lays out
special tokens and token types: BERT's [CLS] A [SEP] B [SEP] with types 0 then 1, RoBERTa's
<s> A </s></s> B </s> with types 0 throughout. The pad id comes from the tokenizer too, never
a hard-coded "[PAD]". Padding and truncation stored in tokenizer.json are ignored
(all-MiniLM-L6-v2's pads everything to 128): a batch is padded to its longest text, and a
text longer than the model allows is an error unless truncation is asked for.

A loaded tokenizer is never changed afterwards, so threads can share it: truncation uses a
copy made once per length (the last few lengths are kept), and padding is done here.
"""

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.errors import InputError, first_line
from npbert.loading.config import read_json_object

# The tokenizers library raises plain Exception for a file it cannot read or a text its
# model cannot encode (a WordPiece vocabulary without its [UNK] token).
TokenizersError = Exception

TOKENIZER_CONFIG = "tokenizer_config.json"


@dataclass(frozen=True, eq=False)
class Encoding:
    """A tokenized batch, padded to its longest text. Arrays (B, L) int64."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray  # as the tokenizer gives them; a family may not use them
    attention_mask: np.ndarray  # 1 for tokens, 0 for padding
    tokens: list[list[str]]  # each text's tokens, without padding


class Tokenizer:
    """A checkpoint's tokenizer and its pad id; shared safely between threads."""

    def __init__(self, tokenizer, pad_token_id: int | None, name: str = "the tokenizer"):
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer, never changed after this
        self.pad_token_id = pad_token_id
        self.name = name  # for errors: the file it was read from
        # max_length -> a copy that truncates; lru_cache is safe to call from threads.
        self.truncating = functools.lru_cache(maxsize=8)(self._truncating)

    def __reduce__(self):
        """Pickled (a process pool, Ray) as what it was made from: the cache of truncating
        copies is not picklable, and is made again where it is used."""
        return (type(self), (self.tokenizer, self.pad_token_id, self.name))

    def _truncating(self, max_length: int):
        """A copy of the tokenizer that truncates to max_length."""
        from tokenizers import Tokenizer as Library

        copy = Library.from_str(self.tokenizer.to_str())
        copy.enable_truncation(max_length=max_length)
        return copy

    def encode_batch(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        *,
        max_length: int | None,
        truncation: bool = False,
        names: list[str] | None = None,
        with_tokens: bool = True,
    ) -> list:
        """tokenizers Encodings of B texts (or B (text, pair) pairs), unpadded. `names` label
        the texts in errors ("text 3", "input.txt line 9"). with_tokens=False: ids and token
        types only (the encodings' token strings are left empty), for a corpus."""
        if not texts:
            raise InputError("no text to embed")
        _check_texts("texts", texts, names)
        inputs = texts
        if pairs is not None:
            _check_texts("pairs", pairs, names)
            if len(pairs) != len(texts):
                raise InputError(f"{len(texts)} texts but {len(pairs)} pairs: give one per text")
            inputs = list(zip(texts, pairs, strict=True))
        cut = truncation and max_length is not None
        tokenizer = self.truncating(max_length) if cut else self.tokenizer
        encode = tokenizer.encode_batch
        if not with_tokens:  # no offsets, no token strings (tokenizers 0.20 on): faster
            encode = getattr(tokenizer, "encode_batch_fast", encode)
        try:
            encodings = encode(inputs)
        except TokenizersError as error:
            raise InputError(f"{self.name} cannot encode the texts: {first_line(error)}") from None
        for i, encoding in enumerate(encodings):
            self._check_length(encoding, inputs[i], names[i] if names else f"texts[{i}]",
                               max_length, cut)  # fmt: skip
        return encodings

    def _check_length(self, encoding, item, name: str, max_length: int | None, cut: bool):
        """InputError for an encoding longer than max_length, or one that truncation (cut)
        left without a token of its text or pair."""
        if cut and encoding.overflowing and (lost := self._emptied(encoding, item)):
            raise InputError(
                f"{name}: truncation to max_length={max_length} leaves no token of its "
                f"{' or '.join(lost)}: give a larger max_length"
            )
        if max_length is None or len(encoding.ids) <= max_length:
            return
        if cut:  # truncated, and still too long: the special tokens alone are
            why = (
                f"{max_length} at most allowed, too few for the tokenizer's own special tokens "
                "around it: truncation cannot make it fit"
            )
        else:
            why = (
                f"more than the limit of {max_length}; pass {{truncation=True}} to keep the "
                f"first {max_length}"
            )
        raise InputError(f"{name} has {len(encoding.ids)} tokens, {why}")

    def _emptied(self, truncated, item) -> list[str]:
        """The sides of a truncated encoding ("text", "pair") that had tokens before and have
        none now: every such text would embed alike, as its special tokens alone."""
        pair = isinstance(item, tuple)
        sides = {0, 1} if pair else {0}
        if sides <= set(truncated.sequence_ids):
            return []
        whole = self.tokenizer.encode(*item) if pair else self.tokenizer.encode(item)
        lost = (set(whole.sequence_ids) - set(truncated.sequence_ids)) & sides
        return [("text", "pair")[side] for side in sorted(lost)]

    def pad(self, encodings: list) -> Encoding:
        """Encodings padded to the longest with the tokenizer's pad id: (B, L) arrays."""
        lengths = [len(encoding.ids) for encoding in encodings]
        longest = max(lengths)
        if min(lengths) < longest and self.pad_token_id is None:
            raise InputError(
                "texts of different lengths need padding, and the tokenizer has no pad token"
            )
        shape = (len(encodings), longest)
        input_ids = np.full(shape, self.pad_token_id or 0, np.int64)
        token_type_ids = np.zeros(shape, np.int64)
        attention_mask = np.zeros(shape, np.int64)
        for row, (encoding, length) in enumerate(zip(encodings, lengths, strict=True)):
            input_ids[row, :length] = encoding.ids
            token_type_ids[row, :length] = encoding.type_ids
            attention_mask[row, :length] = 1
        tokens = [list(encoding.tokens) for encoding in encodings]
        return Encoding(input_ids, token_type_ids, attention_mask, tokens)


def _check_texts(name: str, texts: list, names: list[str] | None) -> None:
    for i, text in enumerate(texts):
        label = names[i] if names else f"{name}[{i}]"
        if not isinstance(text, str):
            raise InputError(f"{label} is {type(text).__name__}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate, from bad bytes upstream
            raise InputError(
                f"{label} is not valid Unicode: {error.reason} at character {error.start}"
            ) from None


def load_tokenizer(
    directory: str | os.PathLike, *, vocab_txt: bool, pad_token_id: int | None
) -> Tokenizer:
    """The checkpoint's tokenizer.json, or, where the family uses BERT's tokenizer
    (vocab_txt), its vocab.txt as the tokenizers library's BertWordPieceTokenizer.
    The pad id: tokenizer.json's, tokenizer_config.json's pad_token, else pad_token_id."""
    directory = Path(directory)
    settings = _tokenizer_config(directory)  # read whenever present: a broken one is refused
    try:  # the tokenizers library opens files by str paths, which must be valid UTF-8
        str(directory).encode()
    except UnicodeEncodeError:
        raise InputError(
            f"{os.fsdecode(directory)!r}: the tokenizers library cannot open files under a "
            "path that is not valid UTF-8; rename the directory"
        ) from None
    source = tokenizer_file(directory, vocab_txt=vocab_txt)
    if source is None:
        raise InputError(f"{directory} has no {tokenizer_files(vocab_txt=vocab_txt)}")
    if source.name == "tokenizer.json":
        from tokenizers import Tokenizer as Library

        try:
            tokenizer = Library.from_file(str(source))
        except TokenizersError as error:
            raise InputError(
                f"{source} is not a tokenizer the tokenizers library reads: {first_line(error)}"
            ) from None
    else:
        tokenizer = _wordpiece(source, _normalizer(settings, directory))
    return Tokenizer(tokenizer, _pad_id(tokenizer, settings, directory, pad_token_id), str(source))


def tokenizer_files(*, vocab_txt: bool) -> str:
    """The files tokenizer_file looks for, as errors name them."""
    return "tokenizer.json or vocab.txt" if vocab_txt else "tokenizer.json"


def tokenizer_file(directory: Path, *, vocab_txt: bool) -> Path | None:
    """The file load_tokenizer reads: tokenizer.json, else, where the family uses BERT's
    tokenizer (vocab_txt), vocab.txt; None where there is neither."""
    if (directory / "tokenizer.json").is_file():
        return directory / "tokenizer.json"
    if vocab_txt and (directory / "vocab.txt").is_file():
        return directory / "vocab.txt"
    return None


def _wordpiece(vocab: Path, normalizer: dict):
    """BERT's WordPiece tokenizer from vocab.txt, which must hold [CLS], [SEP] and [UNK]."""
    from tokenizers import BertWordPieceTokenizer

    try:
        text = vocab.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{vocab} is not UTF-8 text") from None
    if "\0" in text:
        raise InputError(f"{vocab} holds NUL bytes: a binary file, not a vocabulary")
    words = text.splitlines()
    missing = [token for token in ("[CLS]", "[SEP]", "[UNK]") if token not in words]
    if missing:
        raise InputError(f"{vocab} lacks {', '.join(missing)}: it is not a BERT vocabulary")
    return BertWordPieceTokenizer(str(vocab), **normalizer)


def _tokenizer_config(directory: Path) -> dict:
    path = directory / TOKENIZER_CONFIG
    return read_json_object(path) if path.is_file() else {}


# tokenizer_config.json's BertTokenizer settings -> BertWordPieceTokenizer's, with
# transformers' defaults: uncased, accents stripped as the text is lowercased (None), CJK
# characters split apart.
NORMALIZER = {
    "do_lower_case": ("lowercase", True, (bool,)),
    "strip_accents": ("strip_accents", None, (bool, type(None))),
    "tokenize_chinese_chars": ("handle_chinese_chars", True, (bool,)),
}


def _normalizer(settings: dict, directory: Path) -> dict:
    """The WordPiece normalizer's settings from tokenizer_config.json, each checked."""
    options = {}
    for key, (option, default, types) in NORMALIZER.items():
        value = settings.get(key, default)
        if not isinstance(value, types):
            raise InputError(f"{directory / TOKENIZER_CONFIG}: {key} must be true or false")
        options[option] = value
    return options


def _pad_id(tokenizer, settings: dict, directory: Path, fallback: int | None) -> int | None:
    """The pad token's id as the tokenizer knows it, else config.json's pad_token_id."""
    if tokenizer.padding is not None:
        return tokenizer.padding["pad_id"]
    pad = settings.get("pad_token")
    if isinstance(pad, dict):  # an AddedToken as transformers saves it
        pad = pad.get("content")
    if pad is None:
        return fallback
    if not isinstance(pad, str):
        raise InputError(
            f"{directory / TOKENIZER_CONFIG}: pad_token must be a string or an object with a "
            f"string 'content', not {type(pad).__name__}"
        )
    pad_id = tokenizer.token_to_id(pad)
    return fallback if pad_id is None else pad_id
