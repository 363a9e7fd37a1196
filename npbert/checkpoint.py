"""Reading BERT's five embedding tensors and their config from a local checkpoint directory.

safetensors only: npbert never unpickles, so a pytorch_model.bin is refused with a way out.
Real checkpoints name the tensors differently, and all of these load:
    [prefix.]embeddings.word_embeddings.weight           prefix: "", "bert.", ...
    [prefix.]embeddings.LayerNorm.weight | .gamma        (.gamma/.beta: bert-base-uncased)
An integer `embeddings.position_ids` buffer, in older exports, is ignored.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npbert.errors import InputError

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5")

# EmbeddingWeights field -> the tensor name after "[prefix.]embeddings.", legacy names after.
TENSOR_NAMES = {
    "word_embeddings": ("word_embeddings.weight",),
    "position_embeddings": ("position_embeddings.weight",),
    "token_type_embeddings": ("token_type_embeddings.weight",),
    "layer_norm_weight": ("LayerNorm.weight", "LayerNorm.gamma"),
    "layer_norm_bias": ("LayerNorm.bias", "LayerNorm.beta"),
}
ANCHOR = "embeddings.word_embeddings.weight"


@dataclass(frozen=True, eq=False)
class EmbeddingWeights:
    """BERT's embedding parameters as float32 arrays, named as in Hugging Face's BertEmbeddings."""

    word_embeddings: np.ndarray  # (V, H) float32
    position_embeddings: np.ndarray  # (P, H) float32
    token_type_embeddings: np.ndarray  # (T, H) float32
    layer_norm_weight: np.ndarray  # (H,) float32, gamma
    layer_norm_bias: np.ndarray  # (H,) float32, beta
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    source: dict = field(default_factory=dict)  # where these came from: model, revision, sha256
    files: tuple[Path, ...] = ()  # the safetensors files the tensors were read from

    @property
    def vocab_size(self) -> int:
        return self.word_embeddings.shape[0]

    @property
    def max_position_embeddings(self) -> int:
        return self.position_embeddings.shape[0]

    @property
    def type_vocab_size(self) -> int:
        return self.token_type_embeddings.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.word_embeddings.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the five tensors as float32."""
        return sum(getattr(self, name).nbytes for name in TENSOR_NAMES)


@dataclass(frozen=True)
class StoredTensor:
    """Where one embedding tensor lives: file, name in the file, stored dtype and shape."""

    file: Path
    name: str
    dtype: str  # safetensors dtype string: F32, F16, BF16
    shape: tuple[int, ...]
    offset: int  # of the tensor's first byte in the file
    nbytes: int


def read_config(directory: Path) -> dict:
    """config.json as a dict; refuses models whose embedding layer is not BERT's."""
    path = directory / "config.json"
    if not path.is_file():
        raise InputError(f"{directory} has no config.json: npbert needs it for layer_norm_eps")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"{path} is not valid JSON: {error}") from None
    kind = config.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise InputError(
            f"{path}: position_embedding_type is {kind!r}; npbert implements BERT's learned "
            "absolute position embeddings only"
        )
    return config


def weight_files(directory: Path) -> tuple[dict[str, Path], dict[Path, tuple]]:
    """(tensor name -> the safetensors file holding it, file -> _header of the files parsed
    so far): one model.safetensors, or shards named by the index and not opened yet."""
    single = directory / WEIGHTS_FILE
    index = directory / INDEX_FILE
    if single.is_file():
        header = _header(single)
        return dict.fromkeys(header[1], single), {single: header}
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: directory / shard for name, shard in weight_map.items()}, {}
    raise no_safetensors(str(directory), [p.name for p in directory.iterdir()])


def no_safetensors(where: str, files: list[str]) -> InputError:
    """The error for a checkpoint without safetensors weights, pickled or absent."""
    pickled = [name for name in PICKLE_FILES if name in files]
    if pickled:
        return InputError(
            f"{where} has only {pickled[0]}: npbert reads safetensors and never unpickles. "
            "Convert it once with transformers: "
            "AutoModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)"
        )
    return InputError(f"{where} has no {WEIGHTS_FILE} or {INDEX_FILE}")


def embedding_tensor_names(names, where: str) -> dict[str, str]:
    """EmbeddingWeights field -> tensor name, whatever prefix and LayerNorm names are used."""
    names = set(names)
    prefixes = sorted(name[: -len(ANCHOR)] for name in names if name.endswith(ANCHOR))
    if len(prefixes) != 1:
        found = "none" if not prefixes else ", ".join(p + ANCHOR for p in prefixes)
        raise InputError(f"{where}: expected one '*{ANCHOR}' tensor, found {found}")
    stem = prefixes[0] + "embeddings."
    chosen = {}
    for field_name, candidates in TENSOR_NAMES.items():
        present = [stem + c for c in candidates if stem + c in names]
        if not present:
            wanted = " or ".join(stem + c for c in candidates)
            raise InputError(f"{where}: no tensor named {wanted}")
        chosen[field_name] = present[0]
    return chosen


def find_embedding_tensors(directory: Path) -> dict[str, StoredTensor]:
    """EmbeddingWeights field -> StoredTensor for a local checkpoint directory."""
    files, headers = weight_files(directory)
    names = embedding_tensor_names(files, str(directory))
    for path in {files[name] for name in names.values()} - headers.keys():  # shards only
        headers[path] = _header(path)
    return {key: _describe(files[name], name, *headers[files[name]]) for key, name in names.items()}


def _open(path: Path):
    """safetensors' own reader; a damaged file is bad input, not a crash."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise InputError(f"{path.name} is missing from {path.parent}")
    try:
        return safe_open(path, framework="numpy")
    except SafetensorError as error:
        raise InputError(f"{path} is not a valid safetensors file: {error}") from None


def _header(path: Path) -> tuple[int, dict]:
    """(where the data buffer starts, tensor name -> npbert.header.TensorHeader).

    safetensors validates the file; npbert.header gives each tensor's data_offsets, relative to
    the data buffer, which starts after the format's 8-byte little-endian header length and
    the header itself.
    """
    from npbert.header import read_file_header

    with _open(path):  # validates the header: offsets in bounds, buffer fully covered
        pass
    return read_file_header(path)


def _describe(path: Path, name: str, data_start: int, tensors: dict) -> StoredTensor:
    info = tensors[name]
    begin, end = info.data_offsets
    return StoredTensor(path, name, info.dtype, tuple(info.shape), data_start + begin, end - begin)


# How each stored float dtype is mapped: bfloat16 as its raw 16 bits (NumPy has no bfloat16).
STORED = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_tensor(stored: StoredTensor) -> np.ndarray:
    """One stored tensor as float32, memory-mapped rather than read.

    A float32 tensor is not copied at all: a lookup reads from disk only the rows it touches,
    and the OS shares the pages between processes. float16 widens exactly; bfloat16 is the
    top half of a float32, so widening it is a 16-bit shift, also exact.
    """
    if stored.dtype not in STORED:
        raise InputError(f"{stored.file.name}: {stored.name} is {stored.dtype}, not a float tensor")
    raw = np.asarray(np.memmap(stored.file, STORED[stored.dtype], "r", stored.offset, stored.shape))
    if stored.dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32, copy=False)


def check_shapes(tensors: dict[str, StoredTensor], config: dict, directory: Path) -> None:
    """The five shapes must agree with each other and with config.json."""
    hidden = tensors["word_embeddings"].shape[-1]
    expected = {
        "word_embeddings": (config.get("vocab_size"), hidden),
        "position_embeddings": (config.get("max_position_embeddings"), hidden),
        "token_type_embeddings": (config.get("type_vocab_size"), hidden),
        "layer_norm_weight": (hidden,),
        "layer_norm_bias": (hidden,),
    }
    if config.get("hidden_size", hidden) != hidden:
        raise InputError(
            f"{directory}: word_embeddings has hidden size {hidden}, "
            f"config.json says hidden_size {config['hidden_size']}"
        )
    for key, want in expected.items():
        got = tensors[key].shape
        agrees = len(got) == len(want) and all(
            w is None or w == g for w, g in zip(want, got, strict=True)
        )
        if not agrees:
            shown = tuple("?" if w is None else w for w in want)
            raise InputError(
                f"{directory}: {tensors[key].name} has shape {got}, expected {shown} "
                "from the other tensors and config.json"
            )


def load_checkpoint(directory: Path, source: dict | None = None) -> EmbeddingWeights:
    """The five embedding tensors of a local checkpoint directory, as float32."""
    config = read_config(directory)
    tensors = find_embedding_tensors(directory)
    check_shapes(tensors, config, directory)
    arrays = {key: read_tensor(stored) for key, stored in tensors.items()}
    return EmbeddingWeights(
        **arrays,
        layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
        pad_token_id=int(config.get("pad_token_id") or 0),
        source=dict(source or {"model": str(directory)}),
        files=tuple(sorted({stored.file for stored in tensors.values()})),
    )
