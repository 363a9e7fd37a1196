"""The embedding layer's parameters: EmbeddingWeights, float32 arrays of the shapes its config
gives them, read-only."""

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from npbert.errors import InputError
from npbert.layer.config import EmbeddingConfig


@dataclass(frozen=True, eq=False)
class EmbeddingWeights:
    """One checkpoint's embedding parameters as float32 arrays, and its configuration.

    Named as in Hugging Face's modules (LayerNorm's weight is gamma, its bias beta). None
    where the family has no such tensor.
    """

    config: EmbeddingConfig
    word_embeddings: np.ndarray  # (V, E)
    layer_norm_weight: np.ndarray | None = None  # (E,); (H,) in DeBERTa; None without a norm
    layer_norm_bias: np.ndarray | None = None  # like layer_norm_weight; None in ModernBERT
    position_embeddings: np.ndarray | None = None  # (P, E); (P, H) in MobileBERT
    token_type_embeddings: np.ndarray | None = None  # (T, E); (T, H) in MobileBERT
    projection_weight: np.ndarray | None = None  # (H, E) as torch's Linear stores it; (H, 3E)
    projection_bias: np.ndarray | None = None  # (H,)
    source: dict = field(default_factory=dict)  # where these came from: model, revision, commit
    files: tuple[Path, ...] = ()  # the safetensors files the tensors were read from

    def __post_init__(self):
        """Every array float32, of the shape the config gives it, where the family has it;
        an array that can be written is copied to one that cannot: npbert.layer.fast caches tables
        derived from these, which an edit in place would leave stale."""
        if not isinstance(self.config, EmbeddingConfig):
            raise InputError(f"EmbeddingWeights: config is {type(self.config).__name__}")
        # ModernBERT's LayerNorm has a bias only with norm_bias, which the config does not keep
        # (ESM's norm is optional too, but whole: config.norm says)
        optional = self.config.family.optional
        no_bias = "layer_norm_bias" in optional and "layer_norm_weight" not in optional
        for name, shape in expected_shapes(self.config).items():
            array = getattr(self, name)
            if array is None and (shape is None or (no_bias and name == "layer_norm_bias")):
                continue
            if shape is None or not (
                isinstance(array, np.ndarray) and array.dtype == np.float32 and array.shape == shape
            ):
                wanted = "none" if shape is None else f"{shape} float32"
                raise InputError(
                    f"EmbeddingWeights: {name} is {_shown(array)}, but the config "
                    f"({self.config.model_type}) asks for {wanted}"
                )
            if _writable(array):
                object.__setattr__(self, name, read_only(array.copy()))

    def __reduce__(self):
        """Pickled (multiprocessing, joblib, Ray, copy.deepcopy) as its fields, and rebuilt
        with its arrays read-only: pickle makes them writable, and __init__ would copy them."""
        return (_unpickled, (type(self), {f.name: getattr(self, f.name) for f in fields(self)}))

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The tensors this checkpoint has, by field name."""
        arrays = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in arrays.items() if isinstance(v, np.ndarray)}

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors, as float32."""
        return sum(array.nbytes for array in self.arrays.values())


def check_weights(weights) -> None:
    """InputError unless `weights` is an EmbeddingWeights, as every function taking one needs."""
    if not isinstance(weights, EmbeddingWeights):
        raise InputError(
            f"weights must be npbert's EmbeddingWeights (npbert.load_weights), not "
            f"{type(weights).__name__}"
        )


def expected_shapes(config: EmbeddingConfig) -> dict[str, tuple[int, ...] | None]:
    """Each EmbeddingWeights array's shape under `config`; None where the family has none."""
    e, h, out = config.embedding_size, config.hidden_size, config.output_size
    norm = None if config.norm is None else (out,)  # Megatron-BERT's layer has none
    rows = h if config.family.projection == "words" else e  # MobileBERT's P and T are H wide
    positions, types = config.max_position_embeddings, config.type_vocab_size
    biased = config.projection and "projection_bias" in config.family.tensors  # not DeBERTa's
    return {
        "word_embeddings": (config.vocab_size, e),
        "layer_norm_weight": norm,
        "layer_norm_bias": norm,
        "position_embeddings": None if positions is None else (positions, rows),
        "token_type_embeddings": (types, rows) if types else None,
        "projection_weight": (h, e * (3 if config.trigram else 1)) if config.projection else None,
        "projection_bias": (h,) if biased else None,
    }


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.shape} {value.dtype}"
    return "None" if value is None else type(value).__name__


def _writable(array: np.ndarray) -> bool:
    """Whether the array's memory can be written: through it, an array it views, or an owner
    that is not an array (a writable buffer; a torch tensor or as_strided's stand-in, which
    offer no buffer to ask, are taken as writable). Read-only maps of a file are not."""
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return True
        array = array.base
    if array is None:
        return False
    try:
        return not memoryview(array).readonly
    except TypeError:
        return True


def _unpickled(cls: type, values: dict) -> EmbeddingWeights:
    """EmbeddingWeights.__reduce__'s rebuild: its arrays, fresh from pickle, are its alone."""
    for value in values.values():
        if isinstance(value, np.ndarray):
            read_only(value)
    return cls(**values)


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of `array` that cannot be written, its owner marked read-only too: only a
    deliberate `.base.flags.writeable = True` on a copy npbert owns makes it writable again
    (a memory map's cannot be)."""
    owner = array.base if isinstance(array.base, np.ndarray) else array  # not a map's buffer
    owner.flags.writeable = False
    return array.view()
