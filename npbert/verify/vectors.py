"""Conformance vectors: inputs and every stage's expected output, as .npy files any language
can read, with a manifest.json naming each file, its shape and dtype, the tolerance, and the
checkpoint's sha256."""

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from npbert.atomic import building_directory
from npbert.embedder import Embedder
from npbert.errors import InputError
from npbert.layer.inputs import check_path
from npbert.layer.weights import EmbeddingWeights
from npbert.loading.checkpoint import NOT_FINITE, float32_trouble
from npbert.loading.tokenize import tokenizer_file, tokenizer_files
from npbert.model import checkpoint_tokenizer, embed_stages, resolve_weights
from npbert.verify.tolerances import STEPS, check_finite, stage_atols
from npbert.verify.vectors_format import BASE_ATOL, FORMAT, RANDOM_IDS, STAGE_MEANING

SEEDS = [
    "The quick brown fox jumps over the lazy dog",
    "I am Sinan",
    "this is a test sentence",
]


# The longest case's tokens at most: ModernBERT's 8192, every stage in two dtypes ~0.5 GB.
LONGEST = 8192


SPECIAL = 16  # special tokens in their case at most (those after are left out, and said so)


QUESTION = "Why are BERT's position embeddings learned?"


PASSAGE = "The authors chose learned absolute position embeddings over fixed sinusoids."


def load_model(model: str | os.PathLike, **options) -> tuple[Embedder | EmbeddingWeights, str]:
    """What write_vectors takes for a checkpoint (options as load_weights'): its Embedder, or
    its weights alone where it has no tokenizer file or npbert cannot run it (RoFormer's),
    with why ("" for an Embedder)."""
    directory, weights = resolve_weights(model, **options)
    config = weights.config
    if config.family.no_text:
        return weights, f"{config.model_type}: {config.family.no_text}"
    if tokenizer_file(Path(directory), vocab_txt=config.family.vocab_txt) is None:
        return weights, f"{model} has no {tokenizer_files(vocab_txt=config.family.vocab_txt)}"
    return Embedder(weights, checkpoint_tokenizer(directory, weights)), ""


def new_directory(directory) -> Path:
    """`directory` as a Path, or InputError unless it is new, in a directory that exists."""
    directory = check_path("directory", directory)
    if not directory:  # Path("") is the current directory
        raise InputError("the directory is empty: give a new directory for the vectors")
    directory = Path(directory)
    if directory.exists():
        raise InputError(f"{directory} exists: give a new directory for the vectors")
    if not directory.parent.exists():
        raise InputError(f"{directory}: directory {directory.parent} does not exist")
    if not directory.parent.is_dir():
        raise InputError(f"{directory}: {directory.parent} is a file, not a directory")
    return directory


def new_manifest(model, weights: EmbeddingWeights) -> dict:
    """manifest.json before its cases: the model, its settings, its files' sha256, the
    tolerances."""
    # null where the layer has no LayerNorm (MobileBERT's NoNorm, Megatron-BERT's none)
    eps = weights.config.layer_norm_eps if weights.config.norm == "layer_norm" else None
    return {
        "format": "npbert conformance vectors, version 3 (FORMAT.md)",
        "model": weights.source,
        "tokenizer": None if model is weights else Path(model.tokenizer.name).name,
        "model_type": weights.config.model_type,
        "formula": weights.config.formula,
        "config": {
            **dataclasses.asdict(weights.config),
            "layer_norm_eps": eps,
            "layer_norm_bias": weights.layer_norm_bias is not None,
        },
        "weights_sha256": {path.name: sha256(path) for path in weights.files},
        "layer_norm_eps": eps,
        # each float64 file's "atol" applies these to its values (FORMAT.md)
        "tolerance": {dtype: {"atol": atol, "steps": STEPS} for dtype, atol in BASE_ATOL.items()},
        "stages": {},
        "cases": {},
    }


def weights_of(model: Embedder | EmbeddingWeights) -> EmbeddingWeights:
    """The weights of what write_vectors takes."""
    return model if isinstance(model, EmbeddingWeights) else model.weights


def cases(model: Embedder | EmbeddingWeights) -> dict[str, dict]:
    """name -> {description, input_ids, [token_type_ids], [attention_mask], [texts]}."""
    if isinstance(model, EmbeddingWeights):
        return id_cases(model)
    embedder = model
    config, tokenizer = embedder.weights.config, embedder.tokenizer.tokenizer
    first, middle, last = _frame(embedder.tokenizer.name, tokenizer)  # specials, text, specials
    made = {
        f"seed{i}": _text(embedder, f"a well-known example sentence ({i})", [s])
        for i, s in enumerate(SEEDS)
    }
    types = config.type_vocab_size  # 0: the model has no table, and the tokenizer's go unused
    if not types or max(tokenizer.encode(QUESTION, PASSAGE).type_ids) < types:
        # not where the tokenizer gives sentence B a token type past the model's table (a
        # BERT of type_vocab_size 1): such a model takes no pairs
        made["pair"] = _text(embedder, "a question/passage pair", [QUESTION], [PASSAGE])
    made["padded_batch"] = _text(embedder, "the example sentences, padded to the longest", SEEDS)
    made["longest"] = _longest(embedder)
    sequence = [*first, *middle, *last]
    if types:
        made["every_token_type"] = _ids(
            f"token types cycling through all {types}",
            sequence,
            np.arange(len(sequence))[None] % types,
        )
    made["repeated_tokens"] = _ids(
        f"one token repeated: {repeated_rows(config)}", [*first, *[middle[0]] * 14, *last]
    )
    special = _special_tokens(embedder)
    if special is not None:
        made["special_tokens"] = special
    return made


def _text(embedder: Embedder, description: str, texts, pairs=None, max_length=None) -> dict:
    """A case of texts (and pairs) as the checkpoint's tokenizer encodes them, cut to the
    model's positions where they are longer (and the description says so)."""
    config, tokenizer = embedder.weights.config, embedder.tokenizer.tokenizer
    limit = max_length or config.max_length  # a model of few positions: the texts cut
    each = zip(texts, pairs or [None] * len(texts), strict=True)
    longest = max(len(tokenizer.encode(t, p).ids) for t, p in each)
    if max_length is None and limit is not None and longest > limit:
        description += f", cut to the model's {limit} positions"
    encoding = embedder.encode(texts, pairs, truncation=limit is not None, max_length=limit)
    return {
        "description": description,
        "texts": texts,
        "pairs": pairs,
        "input_ids": encoding.input_ids,
        "token_type_ids": encoding.token_type_ids,
        "attention_mask": encoding.attention_mask,
    }


def id_cases(weights: EmbeddingWeights) -> dict[str, dict]:
    """The cases of ids alone, for a checkpoint without a tokenizer: ids drawn at random from
    the word table (seed RANDOM_IDS) where cases() takes a text's. input_ids (2, 12) for
    random_ids, (1, 16) for every_token_type and repeated_tokens, (1, L) for longest, (1, 8)
    for padded (its attention_mask 0 on the two pads)."""
    config = weights.config
    rng = np.random.default_rng(RANDOM_IDS)

    def words(*shape: int) -> np.ndarray:
        return rng.integers(0, config.vocab_size, shape)

    made = {"random_ids": _ids("random ids from the word table, a batch of 2", words(2, 12))}
    if types := config.type_vocab_size:
        made["every_token_type"] = _ids(
            f"random ids, token types cycling through all {types}",
            words(16),
            np.arange(16)[None] % types,
        )
    made["repeated_tokens"] = _ids(
        f"one random id repeated: {repeated_rows(config)}", [int(words(1)[0])] * 16
    )
    length = longest_length(config)
    made["longest"] = _ids(f"random ids, {longest_description(config, length)}", words(length))
    if config.pad_token_id is not None and config.pad_token_id < config.vocab_size:
        made["padded"] = _ids(
            "random ids, then config.json's pad_token_id twice, masked as padding",
            [*words(6), *[config.pad_token_id] * 2],
            attention_mask=[[1] * 6 + [0] * 2],
        )
    return made


def repeated_rows(config) -> str:
    """What the repeated_tokens case shows of the family's positions."""
    if config.positions == "none":
        return "rows the same, as the layer has no positions"
    return "rows differ only by position"


def _ids(description: str, input_ids, token_type_ids=None, attention_mask=None) -> dict:
    """A case of ids, (L,) for one sequence or (B, L), token types 0 unless given, and the
    attention mask where given."""
    input_ids = np.array(input_ids, np.int64).reshape(-1, np.shape(input_ids)[-1])  # (B, L)
    types = np.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    case = {"description": description, "input_ids": input_ids, "token_type_ids": types}
    if attention_mask is not None:
        case["attention_mask"] = np.array(attention_mask, np.int64)  # (B, L)
    return case


def _longest(embedder: Embedder) -> dict:
    """The longest sequence the model allows (LONGEST tokens where it has no limit)."""
    config = embedder.weights.config
    length = longest_length(config)
    case = _text(
        embedder,
        longest_description(config, length),
        [" ".join([PASSAGE] * length)],  # cut to `length` tokens
        max_length=length,
    )
    case["description"] += ", a passage repeated and cut to that length"
    return case


def longest_length(config) -> int:
    """The tokens of the longest case: the model's limit, at most LONGEST; 512 for none."""
    return min(config.max_length or 512, LONGEST)


def longest_description(config, length: int) -> str:
    """The longest case's description: the model's limit, or why it is not that long."""
    if length == config.max_length:
        return f"the longest allowed sequence: {length} tokens"
    return (
        f"a long sequence: {length} tokens (the model allows {config.max_length or 'any number'})"
    )


def _special_tokens(embedder: Embedder) -> dict | None:
    """The tokenizer's special tokens that have a row (the first SPECIAL), then two pads; None
    where there are neither."""
    config, tokenizer = embedder.weights.config, embedder.tokenizer.tokenizer
    special = sorted(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)
    # Tokens added to a tokenizer without resizing the model's table have no row: none to test.
    rowless = sum(i >= config.vocab_size for i in special)
    special = [i for i in special if i < config.vocab_size]
    pad = [] if embedder.tokenizer.pad_token_id is None else [embedder.tokenizer.pad_token_id] * 2
    left_out = [f"{rowless} past the word table"] if rowless else []
    if len(special) > SPECIAL:
        left_out.append(f"{len(special) - SPECIAL} past the first {SPECIAL}")
    left_out = f" ({' and '.join(left_out)} left out)" if left_out else ""
    if not (special or pad):
        return None
    return _ids(
        f"every special token of the tokenizer{left_out}, then two pads",
        [*special[:SPECIAL], *pad],
    )


def _frame(name: str, tokenizer) -> tuple[list[int], list[int], list[int]]:
    """The ids of the first example sentence: the special tokens the tokenizer puts before a
    single text, the text's own, and the special tokens after it."""
    encoding = tokenizer.encode(SEEDS[0])
    marks = encoding.special_tokens_mask
    if 0 not in marks:  # a BPE without an unknown token drops what it has no token for
        raise InputError(
            f"{name} encodes {SEEDS[0]!r} to special tokens alone ({' '.join(encoding.tokens)}):"
            " conformance vectors need a tokenizer that gives text some tokens"
        )
    start = marks.index(0)
    end = len(marks) - marks[::-1].index(0)
    return encoding.ids[:start], encoding.ids[start:end], encoding.ids[end:]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_vectors(model: Embedder | EmbeddingWeights, directory: str | os.PathLike) -> dict:
    """Write every case to `directory` (built under a temporary name, then renamed): of text
    and of ids for an Embedder, of ids alone for weights without a tokenizer (load_model)."""
    if not isinstance(model, Embedder | EmbeddingWeights):
        raise InputError(
            "model must be npbert's Embedder (npbert.Embedder.from_pretrained), or its "
            f"EmbeddingWeights for a checkpoint without a tokenizer, not {type(model).__name__}"
        )
    directory = new_directory(directory)
    weights = weights_of(model)
    trouble = float32_trouble(weights)  # in a row no case looks up too: vectors of a broken
    if trouble and trouble.endswith(NOT_FINITE):  # checkpoint would pass for sound
        raise InputError(f"{trouble} (npbert inspect shows where): no vectors are made of it")
    manifest = new_manifest(model, weights)
    with building_directory(directory) as building:
        for name, case in cases(model).items():
            manifest["cases"][name] = _write_case(weights, building / name, case)
        written = {
            Path(f).stem.split(".")[0] for c in manifest["cases"].values() for f in c["files"]
        }
        manifest["stages"] = {k: v for k, v in STAGE_MEANING.items() if k in written}
        (building / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (building / "FORMAT.md").write_text(FORMAT)
    return manifest


def _arrays(weights, case: dict) -> dict[str, np.ndarray]:
    """The case's inputs as the layer used them and every stage in float32 and float64."""
    from npbert.layer.inputs import prepare_inputs

    types = case["token_type_ids"] if weights.config.type_vocab_size else None
    mask = case.get("attention_mask")
    used = prepare_inputs(weights.config, case["input_ids"], types, None, mask)
    arrays = {
        "input_ids": used.input_ids,
        "token_type_ids": used.token_type_ids,
        "position_ids": used.position_ids,
        "attention_mask": used.attention_mask,
    }
    arrays = {name: np.asarray(a, np.int64) for name, a in arrays.items() if a is not None}
    for dtype in (np.float32, np.float64):
        stages = embed_stages(
            weights, case["input_ids"], types, None, mask, dtype=dtype, project=True
        )
        check_finite(stages, f"{case['description']}: the {np.dtype(dtype).name} reference")
        arrays.update({f"{stage}.{np.dtype(dtype).name}": a for stage, a in stages.items()})
    return arrays


def _write_case(weights, folder: Path, case: dict) -> dict:
    folder.mkdir()
    described = {k: case[k] for k in ("description", "texts", "pairs") if case.get(k)}
    described["files"] = {}
    arrays = _arrays(weights, case)
    reference = {name.removesuffix(".float64"): a for name, a in arrays.items()
                 if name.endswith(".float64")}  # fmt: skip
    atols = {dtype: stage_atols(reference, weights, np.dtype(dtype).type, base)
             for dtype, base in BASE_ATOL.items()}  # fmt: skip
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
        info = {"shape": list(array.shape), "dtype": array.dtype.name}
        if name.endswith(".float64"):  # the reference: how far from it each precision may be
            stage = name.removesuffix(".float64")
            info["atol"] = {dtype: atols[dtype][stage] for dtype in BASE_ATOL}
        described["files"][f"{folder.name}/{name}.npy"] = info
    return described
