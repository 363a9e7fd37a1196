"""Reading the embedding tensors of a checkpoint directory: config.json and safetensors.

safetensors only: npbert never unpickles, so a pytorch_model.bin is refused with a way out.
config.json's model_type picks the family (npbert.layer.families), which says which tensors the
layer reads and what they are called; they load with or without the model's prefix
("bert.", "roberta.", "model." ...), with legacy LayerNorm.gamma/.beta names, from one
model.safetensors or from the shards an index names. Stored float32 tensors are
memory-mapped; float16 and bfloat16 widen to float32 exactly. An integer
`embeddings.position_ids` buffer, in older exports, is ignored.
"""

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.errors import InputError
from npbert.layer.config import EmbeddingConfig
from npbert.layer.families import FAMILIES
from npbert.layer.weights import EmbeddingWeights, read_only
from npbert.loading.config import (
    CONFIG_FILE,
    expected_tensors,
    family_of,
    identify,
    make_config,
    read_config,
    read_json_object,
)

WEIGHTS_FILE = "model.safetensors"


INDEX_FILE = "model.safetensors.index.json"


PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5")


TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")


@dataclass(frozen=True)
class StoredTensor:
    """Where one embedding tensor lives: file, name in the file, stored dtype and shape."""

    file: Path
    name: str
    dtype: str  # safetensors dtype string: F32, F16, BF16
    shape: tuple[int, ...]
    offset: int  # of the tensor's first byte in the file
    nbytes: int


def load_checkpoint(directory: str | os.PathLike, source: dict | None = None) -> EmbeddingWeights:
    """The embedding tensors of a local checkpoint directory, as float32, and its config."""
    config, stored = locate_checkpoint(directory)
    return EmbeddingWeights(
        config=config,
        **{key: read_tensor(tensor) for key, tensor in stored.items()},
        source=dict(source or {"model": os.fspath(directory)}),
        files=tuple(sorted({tensor.file for tensor in stored.values()})),
    )


def locate_checkpoint(
    directory: str | os.PathLike,
) -> tuple[EmbeddingConfig, dict[str, StoredTensor]]:
    """(the checked config, EmbeddingWeights field -> StoredTensor), reading only headers."""
    directory = Path(directory)
    raw = read_config(directory)
    files, headers = weight_files(directory)
    where = str(directory / CONFIG_FILE)
    model_type, names = embedding_tensor_names(raw, files, where)
    for path in {files[name] for name in names.values()} - headers.keys():  # shards only
        headers[path] = _header(path)
    stored = {}
    for key, name in names.items():
        if name not in headers[files[name]][1]:
            shard = files[name].name
            raise InputError(f"{directory / INDEX_FILE} puts {name} in {shard}, which lacks it")
        stored[key] = describe(files[name], name, *headers[files[name]])
    return checked_config(raw, model_type, stored, str(directory), where), stored


def checked_config(
    raw: dict, model_type: str, stored: dict[str, StoredTensor], tensors_at: str, where: str
) -> EmbeddingConfig:
    """The config of the tensors `stored` (EmbeddingWeights field -> StoredTensor) under the
    config.json `raw` (at `where`): InputError where the tensors (at `tensors_at`) disagree
    with each other or with the config."""
    check_shapes(stored, model_type, tensors_at)
    return make_config(raw, model_type, {f: t.shape for f, t in stored.items()}, where)


# Output heads that share the word table's values where the config ties them, and that are all
# some tools keep of the two (safetensors' save_model keeps the name that sorts first):
# RoBERTa's lm_head.decoder, BERT's cls.predictions.decoder, ModernBERT's decoder, DistilBERT's
# vocab_projector.
TIED_HEADS = ("decoder.weight", "vocab_projector.weight")


def embedding_tensor_names(raw: dict, names, where: str) -> tuple[str, dict[str, str]]:
    """(model_type, EmbeddingWeights field -> tensor name) for a checkpoint whose config.json
    is `raw` and whose tensors are `names`: the family's tensors, under its prefix or none."""
    model_type = identify(raw, names, where)
    family = family_of(raw, model_type, where)
    names = set(names)
    prefix = tensor_prefix(family, model_type, names, where)
    chosen = {}
    for key in expected_tensors(raw, model_type, where):
        candidates = [prefix + name for name in family.tensors[key]]
        present = [name for name in candidates if name in names]
        if not present:
            raise InputError(
                f"{where}: {model_type} needs the tensor {' or '.join(candidates)}, which the "
                "checkpoint does not have"
            )
        if len(present) > 1:  # transformers renames the legacy name onto the current one, so
            # the legacy tensor silently wins; to anyone else it is not clear: refused
            raise InputError(
                f"{where}: the checkpoint has both {' and '.join(present)}: which one is the "
                "layer's is not clear; keep one"
            )
        chosen[key] = present[0]
    return model_type, chosen


def tensor_prefix(family, model_type: str, names: set, where: str) -> str:
    """The prefix of the checkpoint's tensor names ("bert.", or ""), as its word table shows:
    the family's own or none, or InputError."""
    anchor = family.tensors["word_embeddings"][0]
    prefixes = sorted(name[: -len(anchor)] for name in names if name.endswith(anchor))
    allowed = {"", f"{family.prefix}."} if family.prefix else {""}
    heads = sorted(name for name in names if name.endswith(TIED_HEADS))
    if not prefixes and heads:
        raise InputError(
            f"{where}: the checkpoint has no {anchor}, only {heads[0]}, an output head (which "
            "holds the word table where the config ties them): npbert reads the word table "
            "under its own name; save the model with transformers' save_pretrained, which "
            "stores it so"
        )
    if len(prefixes) != 1 or prefixes[0] not in allowed:
        found = ", ".join(p + anchor for p in prefixes) or "none"
        raise InputError(
            f"{where}: model_type {model_type!r} keeps its word table in "
            f"'{' or '.join(sorted(p + anchor for p in allowed))}', but this checkpoint has "
            f"{found}: the config and the tensors disagree"
        )
    return prefixes[0]


def check_shapes(stored: dict[str, StoredTensor], model_type: str, where: str) -> None:
    """The tensors must agree with each other: tables (N, E), the LayerNorm (E,) or, after
    DeBERTa's projection, (H,), the projection (H, E) and its bias (H,)."""
    word = stored["word_embeddings"]
    if len(word.shape) != 2:  # its last axis would be taken for E, and others blamed
        raise InputError(f"{where}: {word.name} has shape {word.shape}, expected a table (N, E)")
    width = word.shape[-1]  # E
    hidden = stored["projection_weight"].shape[0] if "projection_weight" in stored else width
    projection = FAMILIES[model_type].projection
    normalized = hidden if projection in ("inside", "words") else width
    rows = hidden if projection == "words" else width  # MobileBERT's P and T: H wide
    expected = {
        **{table: (None, rows) for table in TABLES},
        "word_embeddings": (None, width),
        "layer_norm_weight": (normalized,),
        "layer_norm_bias": (normalized,),
        # MobileBERT's takes 3E (its trigram) or E: make_config holds it to its config
        "projection_weight": (hidden, None if projection == "words" else width),
        "projection_bias": (hidden,),
    }
    for key, tensor in stored.items():
        want = expected[key]
        agrees = len(tensor.shape) == len(want) and all(
            w is None or w == g for w, g in zip(want, tensor.shape, strict=True)
        )
        if 0 in tensor.shape:  # a table of no rows (type_vocab_size 0) or rows of no width
            raise InputError(f"{where}: {tensor.name} has shape {tensor.shape}: it is empty")
        if not agrees:
            shown = ", ".join("N" if w is None else str(w) for w in want)
            shown = f"({shown},)" if len(want) == 1 else f"({shown})"
            raise InputError(
                f"{where}: {tensor.name} has shape {tensor.shape}, expected {shown} from the "
                f"other tensors ({word.name} is {word.shape}: (V, E))"  # or is it the odd one?
            )


def weight_files(directory: Path) -> tuple[dict[str, Path], dict[Path, tuple]]:
    """(tensor name -> the safetensors file holding it, file -> _header of the files parsed
    so far): one model.safetensors, or shards named by the index and not opened yet."""
    single = directory / WEIGHTS_FILE
    index = directory / INDEX_FILE
    if single.is_file():
        header = _header(single)
        return dict.fromkeys(header[1], single), {single: header}
    if index.is_file():
        return {name: directory / shard for name, shard in read_index(index).items()}, {}
    for path in (single, index):
        if os.path.lexists(path):  # a directory, a FIFO, a link to nothing or in a loop
            raise InputError(f"{path} is not a regular file npbert can read")
    raise no_safetensors(str(directory), [p.name for p in directory.iterdir()])


def read_index(path: Path) -> dict[str, str]:
    """An index's weight_map, checked: tensor name -> a shard file inside the directory."""
    weight_map = read_json_object(path).get("weight_map")
    if not isinstance(weight_map, dict):
        raise InputError(f"{path} has no weight_map object")
    for name, shard in weight_map.items():
        # A shard outside the directory ("../x", "/x") would load tensors from elsewhere.
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
            raise InputError(f"{path}: {name} is in {shard!r}, not a file of this directory")
        if not shard.endswith(".safetensors"):  # a .bin shard is a pickle: not downloaded
            raise InputError(
                f"{path}: {name} is in {shard}, not a .safetensors file: npbert reads "
                "safetensors and never unpickles"
            )
    return weight_map


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
    """(where the data buffer starts, tensor name -> npbert.loading.header.TensorHeader).

    safetensors validates the file; npbert.loading.header gives each tensor's data_offsets,
    relative to the data buffer, which starts after the format's 8-byte little-endian header
    length and the header itself.
    """
    from npbert.loading.header import read_file_header

    with _open(path):  # validates the header: offsets in bounds, buffer fully covered
        pass
    return read_file_header(path)


def describe(path: Path, name: str, data_start: int, tensors: dict) -> StoredTensor:
    info = tensors[name]
    begin, end = info.data_offsets
    return StoredTensor(path, name, info.dtype, tuple(info.shape), data_start + begin, end - begin)


def scan_values(stored: StoredTensor, rows: int = 4096) -> str:
    """What a stored tensor's values are, for inspect: "finite, |x| <= M", or how many are
    NaN and infinite and the row of the first. Reads the whole tensor, `rows` rows at a time;
    embedding does not, so a NaN there shows only in the outputs of the tokens that use it."""
    array = read_tensor(stored).reshape(stored.shape[0], -1)  # (N, ...): a row per index
    nan = inf = 0
    first, largest = None, 0.0
    for start in range(0, len(array), rows):
        part = array[start : start + rows]
        bad = ~np.isfinite(part)
        if bad.any():
            nan, inf = nan + int(np.isnan(part).sum()), inf + int(np.isinf(part).sum())
            first = start + int(np.argwhere(bad)[0, 0]) if first is None else first
            part = np.where(bad, np.float32(0), part)
        largest = max(largest, float(np.abs(part).max()))
    if first is None:
        return f"finite, |x| <= {largest:.3g}"
    return f"{nan} NaN, {inf} Inf (first in row {first})"


# How each stored float dtype is mapped: bfloat16 as its raw 16 bits (NumPy has no bfloat16).
STORED = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_tensor(stored: StoredTensor) -> np.ndarray:
    """One stored tensor as float32, memory-mapped rather than read.

    A float32 tensor is not copied at all: a lookup reads from disk only the rows it touches,
    and the OS shares the pages between processes. float16 widens exactly; bfloat16 is the
    top half of a float32, so widening it is a 16-bit shift, also exact. A widened copy is
    made read-only like the map: npbert.layer.fast caches tables derived from these arrays, which an
    edit in place would leave stale.
    """
    if stored.dtype not in STORED:
        from npbert.loading.header import not_float

        raise not_float(stored.file, stored.name, stored.dtype)
    raw = np.asarray(np.memmap(stored.file, STORED[stored.dtype], "r", stored.offset, stored.shape))
    if stored.dtype == "F32":
        return raw
    if stored.dtype == "BF16":
        wide = (raw.astype(np.uint32) << 16).view(np.float32)
    else:
        wide = raw.astype(np.float32)
    return read_only(wide)


NOT_FINITE = "holds NaN or Inf"  # how float32_trouble's message for such a tensor ends


def float32_trouble(weights) -> str | None:
    """What in these weights keeps float32 from computing every token, or None: NaN or Inf,
    or values so large that something may overflow: a row's sum of squares, at most
    E (2 S)^2, with S the largest word (BigBird's scale included), type and position values
    summed (for DeBERTa's projection inside, E S max|W| over H), or gamma times a normalized
    value (at most sqrt(E)) plus beta. A pass over the tensors (min and max): for corpora,
    not for a few texts, whose output and NumPy's warnings are checked instead."""
    largest = {}
    for name, array in weights.arrays.items():
        low, high = float(array.min()), float(array.max())
        if not math.isfinite(low + high):
            return f"the checkpoint's {name} {NOT_FINITE}"
        largest[name] = max(-low, high)
    config = weights.config
    width = weights.word_embeddings.shape[1]  # E
    rows = largest["word_embeddings"] * config.word_scale + sum(  # S
        largest.get(name, 0.0) for name in ("token_type_embeddings", "position_embeddings")
    )
    if config.projection == "inside":  # normalized after E -> H
        rows *= width * largest["projection_weight"]
        width = weights.projection_weight.shape[0]  # H
    scaled = largest_output(weights)
    if max(width * (2 * rows) ** 2, scaled) > float(np.finfo(np.float32).max):
        return (
            f"the checkpoint's tensors hold values up to {max(largest.values()):.3g}, too large "
            "for float32"
        )
    return None


def largest_output(weights) -> float:
    """The largest |value| the layer can output: gamma times a normalized value (at most
    sqrt(width) for rows of width values), plus beta; without a norm, the largest sum of rows
    (ESM's token dropout scales its word rows further, where <mask> tokens are given), and
    with MobileBERT's NoNorm, that sum times gamma, plus beta."""
    gamma, beta = weights.layer_norm_weight, weights.layer_norm_bias
    if gamma is None:
        return largest_sum(weights)
    bias = 0.0 if beta is None else float(np.abs(beta).max())
    if weights.config.norm == "no_norm":
        return largest_sum(weights) * float(np.abs(gamma).max()) + bias
    return float(np.abs(gamma).max()) * math.sqrt(gamma.shape[0]) + bias


def largest_sum(weights) -> float:
    """The largest |value| the rows added can reach: the word rows' (through MobileBERT's
    Linear, row sums of |weight| times them, plus its bias) and the other tables'."""
    word = float(np.abs(weights.word_embeddings).max())
    if weights.config.projection == "words":
        rows = float(np.abs(weights.projection_weight).sum(axis=1).max())
        word = rows * word + float(np.abs(weights.projection_bias).max())
    others = (weights.token_type_embeddings, weights.position_embeddings)
    return word + sum(float(np.abs(a).max(initial=0)) for a in others if a is not None)
