"""Text in, embeddings out: the Embedder, a checkpoint's tokenizer and weights together, and
EmbedderOutput, what it returns for a batch or for each text.
"""

import os
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from npbert.errors import InputError
from npbert.layer.inputs import check_count, check_flag
from npbert.layer.ragged import embed_encodings
from npbert.layer.weights import EmbeddingWeights, check_weights
from npbert.model import check_text, checkpoint_tokenizer, embed, resolve_weights


@dataclass(frozen=True, eq=False)
class EmbedderOutput:
    """Embeddings of tokenized text with the inputs that produced them.

    For a list of texts: embeddings (B, L, width) float32, width config.output_size (E, or H
    after DeBERTa's projection), the rest (B, L) int64, padded to the longest text
    (attention_mask 0 on padding). For a single text the batch axis is dropped: (L, width) and
    (L,), with no padding.
    """

    embeddings: np.ndarray
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list


def check_embedder(embedder) -> None:
    """InputError unless `embedder` is an Embedder, as the corpus job and vectors need."""
    if not isinstance(embedder, Embedder):
        raise InputError(
            f"embedder must be npbert's Embedder (npbert.Embedder.from_pretrained), not "
            f"{type(embedder).__name__}"
        )


class Embedder:
    """A tokenizer and the embedding weights of one checkpoint: text in, embeddings out.

    embedder(texts) embeds a list as one batch padded to its longest text, (B, L, width), as a
    model takes it; embedder.embed_each(texts, batch_size=32) embeds a long list in batches
    and returns one unpadded output per text. Threads may share an Embedder.
    """

    def __init__(self, weights: EmbeddingWeights, tokenizer):
        from npbert.loading.tokenize import Tokenizer

        check_weights(weights)
        check_text(weights.config)
        if not isinstance(tokenizer, Tokenizer):
            raise InputError(
                f"tokenizer must be npbert.loading.tokenize.Tokenizer (load_tokenizer), not "
                f"{type(tokenizer).__name__}"
            )
        config = weights.config
        # A base vocabulary past the table is another model's: its ids would be off, mostly in
        # range. Added tokens past it are common (never resized) and refused where they occur.
        words = tokenizer.tokenizer.get_vocab_size(with_added_tokens=False)
        if words > config.vocab_size:
            raise InputError(
                f"{tokenizer.name} has {words} words, more than the model's word table "
                f"({config.vocab_size} rows): the tokenizer and the checkpoint disagree"
            )
        if tokenizer.pad_token_id is not None and tokenizer.pad_token_id >= config.vocab_size:
            raise InputError(
                f"{tokenizer.name} pads with id {tokenizer.pad_token_id}, past the model's word "
                f"table ({config.vocab_size} rows): the tokenizer and the checkpoint disagree"
            )
        if config.positions == "padded" and tokenizer.pad_token_id != config.padding_idx:
            # Positions count the tokens that are not padding_idx: with another pad id,
            # padding would be counted as text.
            raise InputError(
                f"the tokenizer pads with id {tokenizer.pad_token_id}, but {config.model_type}'s "
                f"positions treat id {config.padding_idx} as padding"
            )
        self.weights = weights
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        *,
        revision: str | None = None,
        full: bool = False,
        token: str | bool | None = None,
        cache_dir: str | os.PathLike | None = None,
        local_files_only: bool = False,
    ) -> "Embedder":
        """Load from a local checkpoint directory or a Hub repo id (see load_weights)."""
        hub = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only}
        directory, weights = resolve_weights(model, revision=revision, full=full, **hub)
        check_text(weights.config)  # before reading a tokenizer it would not use
        return cls(weights, checkpoint_tokenizer(directory, weights))

    def encode(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        *,
        truncation: bool = False,
        max_length: int | None = None,
    ):
        """Tokenize a batch: npbert.loading.tokenize.Encoding with (B, L) arrays, padded to the
        longest text (a single text is a batch of one). Arguments as __call__."""
        texts, pairs = _batch(texts, pairs)
        encodings = self._tokenize(texts, pairs, truncation, max_length)
        return self._pad(encodings, range(len(encodings)))

    def embed(
        self,
        encoding,
        *,
        dtype: type = np.float32,
        project: bool = False,
        threads: int | None = None,
    ) -> np.ndarray:
        """embed() of an Encoding: its ids, its token types where the family has a table, its
        mask; dtype, project and threads as embed() takes them."""
        from npbert.loading.tokenize import Encoding

        if not isinstance(encoding, Encoding):
            raise InputError(
                f"Embedder.embed takes an Encoding from Embedder.encode, not "
                f"{type(encoding).__name__}: embed texts with embedder(texts), token ids with "
                "npbert.embed(embedder.weights, input_ids)"
            )
        types = encoding.token_type_ids if self.weights.config.type_vocab_size else None
        mask = encoding.attention_mask
        if encoding.input_ids.shape[-1] == 0:
            # Texts of no tokens (a tokenizer that adds none, given empty texts) embed to
            # (B, 0, E), as in the corpus job; embed() refuses empty ids, more likely a bug
            # where ids are given. One token, cut off, gives the width and dtype asked for.
            one = np.zeros((len(encoding.input_ids), 1), np.int64)  # (B, 1)
            kept = embed(
                self.weights, one, None if types is None else one,
                dtype=dtype, project=project, threads=threads,
            )  # fmt: skip
            return kept[:, :0]
        return embed(
            self.weights, encoding.input_ids, types, attention_mask=mask,
            dtype=dtype, project=project, threads=threads,
        )  # fmt: skip

    def __call__(
        self,
        texts: str | list[str],
        pairs: str | list[str] | None = None,
        *,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> EmbedderOutput:
        """Embed a text, or a list of texts as one batch padded to its longest text.

        pairs: sentence B for the text, or one for each text. max_length: the tokens a text
        may have, at most the model's limit (the default); a longer text is an error unless
        truncation=True, which keeps its first max_length tokens. The output holds
        B x longest x width float32: for a long list, embed_each keeps memory bounded.
        """
        single = isinstance(texts, str)
        encoding = self.encode(texts, pairs, truncation=truncation, max_length=max_length)
        arrays = (
            self.embed(encoding),
            encoding.input_ids,
            encoding.token_type_ids,
            encoding.attention_mask,
        )
        if single:
            return EmbedderOutput(*(a[0] for a in arrays), tokens=encoding.tokens[0])
        return EmbedderOutput(*arrays, tokens=encoding.tokens)

    def embed_each(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        *,
        batch_size: int = 32,
        truncation: bool = False,
        max_length: int | None = None,
        show_progress_bar: bool = False,
    ) -> list[EmbedderOutput]:
        """Embed every text of a list on its own: one EmbedderOutput per text, in order, each
        as embedder(text) gives it, (L_i, width) float32 and (L_i,) int64 with no padding.

        The texts are embedded batch_size at a time, each batch's tokens back to back as the
        corpus job embeds them (npbert.layer.ragged): no padding is computed, none is needed (a
        tokenizer without a pad token takes texts of any lengths), and beyond the outputs, the
        embedding's memory stays within one batch. The whole list is tokenized first, so that
        bad input is found before any work, and its Encodings are held to the end (a few
        hundred bytes a token). show_progress_bar: a tqdm bar of the texts embedded.
        Other arguments as __call__.
        """
        from tqdm import tqdm  # not huggingface_hub's: importing it reads the Hub's settings

        if isinstance(texts, str) or isinstance(pairs, str):
            raise InputError(
                "embed_each takes lists of texts (and pairs); embed one with embedder(text)"
            )
        batch_size = check_count("batch_size", batch_size)
        show_progress_bar = check_flag("show_progress_bar", show_progress_bar)
        texts, pairs = _batch(texts, pairs)
        encodings = self._tokenize(texts, pairs, truncation, max_length)
        outputs: list = []
        with tqdm(total=len(encodings), unit="text", disable=not show_progress_bar) as bar:
            for start in range(0, len(encodings), batch_size):
                batch = encodings[start : start + batch_size]
                self._check_ids(batch, range(start, start + len(batch)))
                arrays = embed_encodings(self.weights, batch, threads=None)  # every core
                outputs += _each(batch, arrays)
                bar.update(len(batch))
        return outputs

    def _tokenize(self, texts, pairs, truncation: bool, max_length: int | None) -> list:
        """tokenizers Encodings, unpadded, each within the call's limit on tokens."""
        truncation = check_flag("truncation", truncation)
        limit = self.weights.config.max_length
        if max_length is not None:
            max_length = check_count("max_length", max_length)
            limit = max_length if limit is None else min(max_length, limit)
        return self.tokenizer.encode_batch(texts, pairs, max_length=limit, truncation=truncation)

    def _pad(self, encodings: list, indices):
        """The Encodings padded to their longest, checked (_check_ids). indices: the caller's
        index of each encoding, for errors."""
        self._check_ids(encodings, indices)
        return self.tokenizer.pad(encodings)

    def _check_ids(self, encodings: list, indices) -> None:
        """check_encodings, naming a text by the caller's index of it (indices)."""
        check_encodings(self, encodings, lambda row, i: _where(encodings, indices, row, i))


def check_encodings(embedder: Embedder, encodings: list, where) -> None:
    """Token types and ids the tables have rows for: past them, the tokenizer is not the
    checkpoint's (it would otherwise be blamed on the ids); only a model of one type may lack
    a pair's. where(row, token): where encodings[row]'s token comes from, for errors."""
    config = embedder.weights.config
    for row, encoding in enumerate(encodings):
        types, ids = encoding.type_ids, encoding.ids
        if config.type_vocab_size == 1 and any(types):  # BERT's tokenizer gives sentence B 1
            i = next(i for i, t in enumerate(types) if t)
            refuse_pair(config, where(row, i), types[i])
        if config.type_vocab_size and max(types, default=0) >= config.type_vocab_size:
            i = next(i for i, t in enumerate(types) if t >= config.type_vocab_size)
            refuse_type(embedder, where(row, i), types[i])
        if max(ids, default=0) >= config.vocab_size:
            i = next(i for i, t in enumerate(ids) if t >= config.vocab_size)
            token = embedder.tokenizer.tokenizer.id_to_token(ids[i])  # tokens may be left out
            refuse_token(embedder, where(row, i), token, ids[i])


def _where(encodings: list, indices, row: int, token: int) -> str:
    """Where token `token` of encodings[row] comes from, as the caller gave it: "pairs[3]"
    for a pair's token, else "texts[3]" (special tokens included)."""
    sequence = encodings[row].sequence_ids[token]  # 0, 1, or None for a special token
    return f"{'pairs' if sequence == 1 else 'texts'}[{indices[row]}]"


def refuse_type(embedder: Embedder, where: str, token_type: int) -> None:
    """InputError: the tokenizer's post-processor gives a token type the model has no row for,
    which would be blamed on token_type_ids."""
    config = embedder.weights.config
    raise InputError(
        f"{where}: {embedder.tokenizer.name} gives token type {token_type}, but this "
        f"{config.model_type} has {config.type_vocab_size} token type(s): the tokenizer and "
        "the checkpoint disagree"
    )


def refuse_token(embedder: Embedder, where: str, token: str, token_id: int) -> None:
    """InputError: the tokenizer gives a token an id past the word table (an added token
    the checkpoint's table was never resized for), which would be blamed on input_ids."""
    raise InputError(
        f"{where}: {embedder.tokenizer.name} gives the token {token!r} the id {token_id}, past "
        f"the model's word table ({embedder.weights.config.vocab_size} rows): the tokenizer "
        "and the checkpoint disagree"
    )


def refuse_pair(config, where: str, token_type: int) -> None:
    """InputError: the tokenizer marks sentence B with a token type the model has no row for
    (BERT's tokenizer on a model of one type), which would be blamed on token_type_ids."""
    raise InputError(
        f"{where}: the tokenizer gives sentence B token type {token_type}, but this "
        f"{config.model_type} has {config.type_vocab_size} token type(s): it takes no pairs"
    )


def _batch(texts, pairs) -> tuple[list, list | None]:
    """(texts, pairs) as lists: a str is one text (and its pair a str, if any); a list of
    texts takes a list of pairs, one per text (a str would pair them with its characters)."""
    if isinstance(texts, str):
        if not (pairs is None or isinstance(pairs, str)):
            raise InputError(f"pairs must be a str for a single text, not {type(pairs).__name__}")
        return [texts], None if pairs is None else [pairs]
    if texts is None:  # else "no text to embed", as if the list were empty
        raise InputError("texts must be a str or a list of str, not None")
    if isinstance(pairs, str):
        raise InputError("pairs must be a list with one pair per text when texts is a list")
    return _listed("texts", texts), _listed("pairs", pairs)


def _listed(name: str, values) -> list | None:
    """A list of the texts or pairs given as any ordered collection; None stays None. Bytes
    would iterate as ints, a dict as its keys, a set in no order: refused by name."""
    if values is None:
        return None
    if isinstance(values, bytes | bytearray | memoryview):
        raise InputError(f"{name} is {type(values).__name__}: decode it to a str first")
    if isinstance(values, Mapping | AbstractSet) or not isinstance(values, Iterable):
        raise InputError(f"{name} must be a str or a list of str, not {type(values).__name__}")
    if hasattr(values, "columns"):  # a table (pandas, polars) iterates over its columns
        raise InputError(
            f"{name} is a table ({type(values).__name__}), which iterates over its columns: "
            "give one column of it (frame['text'])"
        )
    if isinstance(values, np.ndarray) and values.ndim == 0:
        raise InputError(f"{name} is a 0-d array: give a str or a list of str")
    return list(values)


def _each(encodings: list, arrays: dict) -> list[EmbedderOutput]:
    """Each text's rows of a batch embedded back to back (embed_encodings' arrays), copied, so
    that no output keeps the whole batch's memory alive."""
    embeddings, ids, types = arrays["embeddings"], arrays["input_ids"], arrays["token_type_ids"]
    ends = np.cumsum(arrays["lengths"]).tolist()  # where each text ends
    return [
        EmbedderOutput(
            embeddings[start:end].copy(),
            ids[start:end].copy(),
            types[start:end].copy(),
            np.ones(end - start, np.int64),
            tokens=encoding.tokens,
        )
        for encoding, start, end in zip(encodings, [0, *ends[:-1]], ends, strict=True)
    ]
