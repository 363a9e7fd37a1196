"""npbert's public API: load the weights, embed ids, or embed text with an Embedder."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.checkpoint import EmbeddingWeights, load_checkpoint
from npbert.embedding import embedding_stages
from npbert.errors import InputError
from npbert.fast import empty, run_blocks
from npbert.inputs import prepare_ids


def resolve(model: str | Path, *, revision: str | None = None, full: bool = False, **hub_options):
    """A local checkpoint directory as is, or a Hub repo id fetched into the cache.

    Returns (directory, source) where source records the model and, for the Hub, the commit.
    From the Hub only the embedding tensors are fetched, unless full=True. hub_options:
    token, cache_dir, local_files_only, with huggingface_hub's meanings.
    """
    from npbert import hub

    return hub.resolve(str(model), revision=revision, full=full, **hub_options)


def load_weights(
    model: str | Path,
    *,
    revision: str | None = None,
    full: bool = False,
    token: str | bool | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> EmbeddingWeights:
    """The five embedding tensors of a checkpoint (local directory or Hub repo id) as float32.

    revision: a Hub branch, tag or commit sha. full: download the whole weights file.
    token, cache_dir, local_files_only: as in huggingface_hub (a token string, True for the
    saved one, False for none; the Hub cache directory; the cache only, no request).
    """
    hub = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only}
    directory, source = resolve(model, revision=revision, full=full, **hub)
    return load_checkpoint(directory, source)


def validated(weights: EmbeddingWeights, input_ids, token_type_ids, position_ids):
    """The ids checked against these weights' tables, with defaults filled (npbert.inputs)."""
    return prepare_ids(
        input_ids,
        token_type_ids,
        position_ids,
        vocab_size=weights.vocab_size,
        type_vocab_size=weights.type_vocab_size,
        max_positions=weights.max_position_embeddings,
    )


def embed_stages(
    weights: EmbeddingWeights,
    input_ids,
    token_type_ids=None,
    position_ids=None,
    *,
    dtype: type = np.float32,
) -> dict[str, np.ndarray]:
    """Every stage of the layer (npbert.embedding.STAGES) for validated ids, in `dtype`.

    input_ids (L,) or (B, L) int; token_type_ids the same shape (default all 0);
    position_ids (L,) or (B, L) (default 0..L-1). Lookups (..., L, H), output (..., L, H).
    """
    input_ids, token_type_ids, position_ids = validated(
        weights, input_ids, token_type_ids, position_ids
    )
    return embedding_stages(
        input_ids,
        token_type_ids,
        position_ids,
        weights.word_embeddings,
        weights.position_embeddings,
        weights.token_type_embeddings,
        weights.layer_norm_weight,
        weights.layer_norm_bias,
        weights.layer_norm_eps,
        dtype=dtype,
    )


def embed(
    weights: EmbeddingWeights,
    input_ids,
    token_type_ids=None,
    position_ids=None,
    *,
    dtype: type = np.float32,
    threads: int | None = None,
) -> np.ndarray:
    """BERT's input embeddings: input_ids (L,) or (B, L) int -> (..., L, H) in `dtype`.

    Token types default to 0 and positions to 0..L-1. Bad ids raise InputError (a ValueError).
    float32 runs the fast path on `threads` threads (default: every core), bit-identical to
    the readable embed_stages. dtype=np.float64 computes every step in float64 from the
    stored weights: the exact reference.
    """
    if np.dtype(dtype) != np.float32:
        return embed_stages(weights, input_ids, token_type_ids, position_ids, dtype=dtype)[
            "embeddings"
        ]
    input_ids, token_type_ids, position_ids = validated(
        weights, input_ids, token_type_ids, position_ids
    )
    batch = np.atleast_2d(input_ids), np.atleast_2d(token_type_ids)  # (B, L) each
    out = empty((*batch[0].shape, weights.hidden_size), weights.word_embeddings)  # (B, L, H)
    run_blocks(weights, out, *batch, position_ids, threads=threads)
    return out.reshape(*input_ids.shape, weights.hidden_size)


@dataclass(frozen=True, eq=False)
class EmbedderOutput:
    """Embeddings of tokenized text with the inputs that produced them.

    For a list of texts: embeddings (B, L, H) float32, the rest (B, L) int64, padded to the
    longest text (attention_mask 0 on padding). For a single text the batch axis is dropped.
    """

    embeddings: np.ndarray
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list


class Embedder:
    """A tokenizer and the embedding weights of one checkpoint: text in, embeddings out."""

    def __init__(self, weights: EmbeddingWeights, tokenizer):
        self.weights = weights
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path,
        *,
        revision: str | None = None,
        full: bool = False,
        token: str | bool | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
    ) -> "Embedder":
        """Load from a local checkpoint directory or a Hub repo id (see load_weights)."""
        from npbert.tokenize import load_tokenizer

        hub = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only}
        directory, source = resolve(model, revision=revision, full=full, **hub)
        return cls(load_checkpoint(directory, source), load_tokenizer(directory))

    def encode(self, texts: list[str], pairs: list[str] | None = None, *, truncation=False):
        """Tokenize a batch: npbert.tokenize.Encoding with (B, L) arrays."""
        from npbert.tokenize import encode

        return encode(
            self.tokenizer,
            texts,
            pairs,
            max_length=self.weights.max_position_embeddings,
            pad_token_id=self.weights.pad_token_id,
            truncation=truncation,
        )

    def __call__(
        self,
        texts: str | list[str],
        pairs: str | list[str] | None = None,
        *,
        truncation: bool = False,
    ) -> EmbedderOutput:
        """Embed a text, a list of texts, or texts with `pairs` (sentence B for each text)."""
        single = isinstance(texts, str)
        if isinstance(pairs, str) and not single:
            raise InputError("pairs must be a list with one pair per text when texts is a list")
        if single:
            texts = [texts]
            pairs = None if pairs is None else [pairs]
        pairs = None if pairs is None else list(pairs)
        encoding = self.encode(list(texts), pairs, truncation=truncation)
        embeddings = embed(self.weights, encoding.input_ids, encoding.token_type_ids)
        arrays = (embeddings, encoding.input_ids, encoding.token_type_ids, encoding.attention_mask)
        if single:
            return EmbedderOutput(*(a[0] for a in arrays), tokens=encoding.tokens[0])
        return EmbedderOutput(*arrays, tokens=encoding.tokens)
