"""npbert's public API: load the weights, embed ids, or embed text with an Embedder."""

import os

import numpy as np
import numpy.typing as npt

from npbert.errors import InputError
from npbert.layer import fast, pool
from npbert.layer.inputs import check_flag, prepare_inputs, shown
from npbert.layer.weights import EmbeddingWeights, check_weights
from npbert.loading.checkpoint import load_checkpoint


def resolve(
    model: str | os.PathLike, *, revision: str | None = None, full: bool = False, **hub_options
):
    """A local checkpoint directory as is, or a Hub repo id fetched into the cache.

    Returns (directory, source) where source records the model and, for the Hub, the commit.
    From the Hub only the embedding tensors are fetched, unless full=True. hub_options:
    token, cache_dir, local_files_only, with huggingface_hub's meanings.
    """
    from npbert.loading import hub

    return hub.resolve(model, revision=revision, full=full, **hub_options)


def load_weights(
    model: str | os.PathLike,
    *,
    revision: str | None = None,
    full: bool = False,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    local_files_only: bool = False,
) -> EmbeddingWeights:
    """The embedding tensors of a checkpoint (local directory or Hub repo id) as float32, and
    its configuration (weights.config): the family config.json's model_type names.

    revision: a Hub branch, tag or commit sha. full: download the whole weights file.
    token, cache_dir, local_files_only: as in huggingface_hub (a token string, True for the
    saved one, False for none; the Hub cache directory; the cache only, no request).
    """
    hub = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only}
    return resolve_weights(model, revision=revision, full=full, **hub)[1]


def resolve_weights(model, **options) -> tuple:
    """(its directory, its EmbeddingWeights) for a local directory or a Hub repo id; options
    as load_weights'."""
    directory, source = resolve(model, **options)
    return directory, load_checkpoint(directory, source)


def check_text(config) -> None:
    """InputError for a family whose text npbert cannot tokenize (Family.no_text)."""
    if config.family.no_text:
        raise InputError(
            f"{config.model_type}: {config.family.no_text}; npbert takes its ids alone "
            "({input_ids})"
        )


def checkpoint_tokenizer(directory, weights: EmbeddingWeights):
    """The checkpoint's tokenizer (npbert.loading.tokenize.load_tokenizer), as its family
    reads it."""
    from npbert.loading.tokenize import load_tokenizer

    config = weights.config
    return load_tokenizer(
        directory, vocab_txt=config.family.vocab_txt, pad_token_id=config.pad_token_id
    )


def float_dtype(dtype) -> np.dtype:
    """float32 or float64, the two precisions npbert computes in; anything else is refused
    (an integer dtype would truncate the weights, a complex one means nothing here)."""
    if dtype is None:  # np.dtype(None) is float64: a None here is more likely a mistake
        raise InputError("dtype is None: use float32 or float64")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        given = shown(dtype)
        raise InputError(f"dtype {given} is not a NumPy dtype: use float32 or float64") from None
    if dtype not in (np.float32, np.float64):
        raise InputError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


def embed_stages(
    weights: EmbeddingWeights,
    input_ids: npt.ArrayLike,
    token_type_ids: npt.ArrayLike | None = None,
    position_ids: npt.ArrayLike | None = None,
    attention_mask: npt.ArrayLike | None = None,
    *,
    dtype: type = np.float32,
    project: bool = False,
) -> dict[str, np.ndarray]:
    """Every stage of the family's layer, in the order computed, in `dtype`: the readable
    specification (npbert.layer.embedding), the reference that `explain`, `compare` and `vectors`
    show. Arguments as embed(), but threads: this runs on the calling thread. The stages are
    named word, token_type, position, sum, embed_proj (DeBERTa's projection), normalized,
    embeddings (each where the family has it), and with project=True the projection after
    the module as "projected" last. Each is (..., L, E) or (..., L, H) in dtype; a position
    stage of BERT's default positions 0..L-1 is (L, E), shared by the batch (RoBERTa's,
    counted from the padding, are (..., L, E)).
    """
    check_weights(weights)
    check_flag("project", project)
    dtype = float_dtype(dtype).type
    inputs = prepare_inputs(weights.config, input_ids, token_type_ids, position_ids, attention_mask)
    stages = weights.config.family.layer(
        weights,
        inputs.input_ids,
        inputs.token_type_ids,
        inputs.position_ids,
        inputs.attention_mask,
        dtype,
    )
    if project and weights.config.projection == "after":
        from npbert.layer.embedding import linear

        stages["projected"] = linear(
            stages["embeddings"], weights.projection_weight, weights.projection_bias
        )
    return stages


def embed(
    weights: EmbeddingWeights,
    input_ids: npt.ArrayLike,
    token_type_ids: npt.ArrayLike | None = None,
    position_ids: npt.ArrayLike | None = None,
    attention_mask: npt.ArrayLike | None = None,
    *,
    dtype: type = np.float32,
    project: bool = False,
    threads: int | None = None,
) -> np.ndarray:
    """The family's embedding layer: input_ids (L,) or (B, L) int -> (..., L, width) in
    `dtype`, width config.output_size (or H with project=True),
    what the family's transformers `model.embeddings(input_ids=..., token_type_ids=...,
    position_ids=...)` returns, with the keywords it takes, in float32 within rounding (the
    same additions in the same order; LayerNorm's reductions round otherwise). DeBERTa's also
    takes the mask (mask=attention_mask) and zeroes padding; other families validate the mask
    and do not use it, as their embedding modules take none.

    Defaults are the family's: token types 0 where it has a table, positions 0..L-1 or
    derived from the padding (RoBERTa). project=True also applies the projection E -> H that
    ALBERT, ELECTRA, RoFormer, ConvBERT and RemBERT apply right after the module: the result is
    what the first encoder layer receives. Bad input raises InputError (a ValueError).

    float32 runs the fast path (npbert.layer.fast) on `threads` threads (default: every core the
    process may use), within 2e-6 of the readable embed_stages for outputs under about 8 (up to
    three float32 steps of the largest output beyond) where the word and position tables do not
    cancel each other and LayerNorm spans more than 4 values (npbert.layer.fast says when).
    dtype=np.float64 computes every step in float64 from the stored weights: the exact
    reference.
    """
    check_weights(weights)
    check_flag("project", project)
    threads = None if threads is None else pool.check_threads(threads)
    if float_dtype(dtype) != np.float32:
        arguments = (weights, input_ids, token_type_ids, position_ids, attention_mask)
        stages = embed_stages(*arguments, dtype=dtype, project=project)
        return stages.get("projected", stages["embeddings"])
    inputs = prepare_inputs(weights.config, input_ids, token_type_ids, position_ids, attention_mask)
    return fast.embed(weights, inputs, project=project, threads=threads)
