"""Conformance vectors: inputs and every stage's expected output, as .npy files any language
can read, with a manifest.json naming each file, its shape and dtype, the tolerance, and the
checkpoint's sha256."""

import hashlib
import json
from pathlib import Path

import numpy as np

from npbert.atomic import building_directory
from npbert.embedding import STAGES
from npbert.errors import InputError
from npbert.model import Embedder, embed_stages

SEEDS = [
    "The quick brown fox jumps over the lazy dog",
    "I am Sinan",
    "this is a test sentence",
]
QUESTION = "Why are BERT's position embeddings learned?"
PASSAGE = "The authors chose learned absolute position embeddings over fixed sinusoids."
TOLERANCE = {"float32": {"atol": 1e-5, "rtol": 0.0}, "float64": {"atol": 1e-12, "rtol": 0.0}}
STAGE_MEANING = {
    "word": "word_embeddings[input_ids], (B, L, H)",
    "position": "position_embeddings[position_ids], (L, H) shared by the batch",
    "token_type": "token_type_embeddings[token_type_ids], (B, L, H)",
    "sum": "word + token_type + position, (B, L, H)",
    "normalized": "(sum - mean) / sqrt(var + layer_norm_eps) over H, before gamma/beta",
    "embeddings": "normalized * gamma + beta: the layer's output, (B, L, H)",
}
FORMAT = """# npbert conformance vectors

One folder per case. Each holds the inputs

    input_ids.npy       (B, L) int64
    token_type_ids.npy  (B, L) int64
    position_ids.npy    (L,)   int64, 0..L-1
    attention_mask.npy  (B, L) int64, for cases made from text (0 marks padding)

and every stage of BERT's embedding layer, in float32 and in float64:

    word.*.npy          word_embeddings[input_ids]                      (B, L, H)
    position.*.npy      position_embeddings[position_ids]               (L, H)
    token_type.*.npy    token_type_embeddings[token_type_ids]           (B, L, H)
    sum.*.npy           word + token_type + position                    (B, L, H)
    normalized.*.npy    (sum - mean) / sqrt(var + eps), over H          (B, L, H)
    embeddings.*.npy    normalized * gamma + beta: the output           (B, L, H)

float64 files are computed in float64 from the stored weights: the exact reference. float32
files are what a float32 implementation should produce. Padding positions are embedded like
any other (BERT's embedding layer ignores the attention mask). manifest.json lists every file
with its shape and dtype, the tolerances (max absolute difference) and the sha256 of the
checkpoint's weights file(s). `.npy` is NumPy's simple format: a header, then raw
little-endian data in C order; readers exist for most languages.

To check an implementation: for each case, feed it the inputs, and compare each stage you can
expose with the float64 file within the manifest's float32 tolerance. The first stage that
disagrees is where the bug is. `npbert compare` does this for one output file.
"""


def cases(embedder: Embedder) -> dict[str, dict]:
    """name -> {description, input_ids, token_type_ids, [attention_mask], [texts]}."""
    weights, tokenizer = embedder.weights, embedder.tokenizer

    def text(description, texts, pairs=None, truncation=False):
        encoding = embedder.encode(texts, pairs, truncation=truncation)
        return {
            "description": description,
            "texts": texts,
            "pairs": pairs,
            "input_ids": encoding.input_ids,
            "token_type_ids": encoding.token_type_ids,
            "attention_mask": encoding.attention_mask,
        }

    def special(token: str) -> int:
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise InputError(f"the tokenizer has no {token} token")
        return token_id

    cls, sep, pad = special("[CLS]"), special("[SEP]"), weights.pad_token_id
    middle = embedder.encode([SEEDS[0]]).input_ids[0, 1:-1]
    types = weights.type_vocab_size
    made = {f"seed{i}": text(f"the seeds' sentence {i}", [s]) for i, s in enumerate(SEEDS)}
    made["pair"] = text("a question/passage pair: types 0 then 1", [QUESTION], [PASSAGE])
    made["padded_batch"] = text("the seeds' sentences, padded to the longest", SEEDS)
    made["longest"] = text(
        f"the longest allowed sequence: {weights.max_position_embeddings} tokens",
        [" ".join([PASSAGE] * weights.max_position_embeddings)],
        truncation=True,
    )
    ids = np.array([[cls, *middle, sep]])
    made["every_token_type"] = {
        "description": f"token types cycling through all {types}",
        "input_ids": ids,
        "token_type_ids": np.arange(ids.size)[None] % types,
    }
    made["repeated_tokens"] = {
        "description": "one token repeated: rows differ only by position",
        "input_ids": np.array([[cls, *[middle[0]] * 14, sep]]),
        "token_type_ids": np.zeros((1, 16), dtype=np.int64),
    }
    made["special_tokens"] = {
        "description": "[CLS], [SEP], [UNK], [MASK] and [PAD] ids",
        "input_ids": np.array([[cls, special("[UNK]"), special("[MASK]"), sep, pad, pad]]),
        "token_type_ids": np.zeros((1, 6), dtype=np.int64),
    }
    return made


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_vectors(embedder: Embedder, directory: Path) -> dict:
    """Write every case to `directory` (built under a temporary name, then renamed)."""
    if directory.exists():
        raise InputError(f"--out {directory} exists: give a new directory")
    if not directory.parent.is_dir():
        raise InputError(f"--out {directory}: directory {directory.parent} does not exist")
    weights = embedder.weights
    manifest = {
        "format": "npbert conformance vectors, version 1 (FORMAT.md)",
        "model": weights.source,
        "weights_sha256": {path.name: sha256(path) for path in weights.files},
        "layer_norm_eps": weights.layer_norm_eps,
        "tolerance": TOLERANCE,
        "stages": STAGE_MEANING,
        "cases": {},
    }
    with building_directory(directory) as building:
        for name, case in cases(embedder).items():
            manifest["cases"][name] = _write_case(weights, building / name, case)
        (building / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (building / "FORMAT.md").write_text(FORMAT)
    return manifest


def _write_case(weights, folder: Path, case: dict) -> dict:
    input_ids, token_type_ids = case["input_ids"], case["token_type_ids"]
    arrays = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "position_ids": np.arange(input_ids.shape[-1]),
    }
    if "attention_mask" in case:
        arrays["attention_mask"] = case["attention_mask"]
    arrays = {name: np.asarray(a, dtype=np.int64) for name, a in arrays.items()}
    for dtype in (np.float32, np.float64):
        stages = embed_stages(weights, input_ids, token_type_ids, dtype=dtype)
        arrays.update({f"{stage}.{np.dtype(dtype).name}": stages[stage] for stage in STAGES})
    folder.mkdir()
    described = {k: case[k] for k in ("description", "texts", "pairs") if case.get(k)}
    described["files"] = {}
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
        described["files"][f"{folder.name}/{name}.npy"] = {
            "shape": list(array.shape),
            "dtype": array.dtype.name,
        }
    return described
