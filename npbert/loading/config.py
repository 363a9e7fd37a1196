"""config.json, read and checked: which family the checkpoint is, and the layer's settings.

Every field npbert uses is checked for its type and range before it is used, because a wrong
value computes silently: a NaN layer_norm_eps gives NaN everywhere, a negative one another
LayerNorm (NaN only in rows whose variance is below |eps|), `true` gives 1, a huge one gives
every token the same output. Sizes are taken from the tensors themselves, and a size
config.json states must agree with them.
"""

import json
import math
from pathlib import Path

from npbert.errors import InputError
from npbert.layer.config import EmbeddingConfig, check_eps, positions_in, unsupported
from npbert.layer.families import FAMILIES, REFUSED
from npbert.layer.family import BERT, Family

CONFIG_FILE = "config.json"


# What reading and parsing a JSON file raise: UnicodeDecodeError (reading) and JSONDecodeError
# (ValueErrors both) for what is not JSON, and for JSON that Python will not read, ValueError
# for an integer literal longer than sys.get_int_max_str_digits() (4300 digits) and
# RecursionError for deep nesting.
JSON_ERRORS = (ValueError, RecursionError)


def read_config(directory: Path) -> dict:
    """config.json as a dict, or InputError."""
    path = Path(directory) / CONFIG_FILE
    if path.exists() and not path.is_file():  # a directory, or a FIFO that would be waited on
        raise InputError(f"{path} is not a regular file: npbert needs it to know the model")
    if not path.is_file():
        raise InputError(f"{directory} has no {CONFIG_FILE}: npbert needs it to know the model")
    return read_json_object(path)


def read_json_object(path: Path) -> dict:
    """A checkpoint's JSON file that must hold an object (config.json, tokenizer_config.json,
    the weights index), or InputError."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except JSON_ERRORS as error:
        raise InputError(f"{path} is not valid JSON: {json_problem(error)}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path} must hold a JSON object, not {type(raw).__name__}")
    return raw


def json_problem(error: Exception) -> str:
    """What one of JSON_ERRORS says, in one line."""
    if isinstance(error, RecursionError):
        return "nested too deeply"
    # Python's own hint after the ';' (sys.set_int_max_str_digits) is for programmers
    return str(error).partition("; use sys.")[0]


def identify(raw: dict, tensor_names, where: str) -> str:
    """The model_type: config.json's when it names a family npbert implements, else InputError.
    A config without one is BERT's only where nothing else could be (legacy_bert)."""
    model_type = raw.get("model_type")
    if model_type is None:
        model_type = legacy_bert(raw, set(tensor_names), where)
    if not isinstance(model_type, str):
        raise InputError(f"{where}: model_type is {model_type!r}, not a string")
    if model_type in REFUSED:
        raise InputError(f"{where}: model_type {model_type!r} is refused: {REFUSED[model_type]}")
    if model_type not in FAMILIES:
        raise unsupported(where, model_type)
    family = family_of(raw, model_type, where)
    for key, (default, refused, why) in family.refuse.items():
        if refused(raw.get(key, default)):
            setting = f"{key}={raw[key]!r}" if key in raw else f"no {key} (default {default!r})"
            raise InputError(f"{where}: {model_type} with {setting} is refused: {why}")
    return model_type


def family_of(raw: dict, model_type: str, where: str) -> Family:
    """The row that reads this config.json: the model_type's, or its other layout's where the
    config has that layout's key (and not both layouts' keys for the width, or InputError)."""
    family = FAMILIES[model_type]
    if family.other_layout is None or family.other_layout[0] not in raw:
        return family
    key, other = family.other_layout
    if family.hidden_key in raw:
        raise InputError(
            f"{where}: {model_type} with both {key} and {family.hidden_key} is refused: its "
            "config.json comes in two layouts, read by different code with different defaults, "
            "and this one mixes them; keep one"
        )
    return other


def legacy_bert(raw: dict, names: set, where: str) -> str:
    """The model_type of a config without one (older BERT checkpoints have none): "bert"
    where its tensors are BERT's and its architectures, if any, BERT classes; else InputError.
    Tensors without BertForPreTraining's `bert.` prefix need such architectures: RoBERTa,
    Longformer and others save the same bare names, and read as BERT their positions would
    be wrong."""
    architectures = raw.get("architectures")
    prefixes = ("bert.",) if architectures is None else ("bert.", "")
    foreign = [(key, name) for key, name in _layer_keys_under_berts_prefix() if key in raw]
    if foreign:
        key, name = foreign[0]
        reason = f"it has {key}, which {name}'s layer reads (its tensors are named as BERT's)"
    elif architectures is not None and not (
        isinstance(architectures, list)
        and architectures
        and all(str(a).startswith("Bert") for a in architectures)
    ):
        reason = f"its architectures ({architectures!r}) are not BERT's"
    elif any(_bert_tensors(names, prefix) for prefix in prefixes):
        return "bert"
    elif _bert_tensors(names, ""):
        reason = "its tensors, with no bert. prefix and no architectures, could be any family's"
    else:
        reason = "its tensors are not BERT's"
    raise InputError(
        f"{where} has no model_type and {reason}: add the model_type (one of "
        f"{', '.join(sorted(FAMILIES))})"
    )


def _layer_keys_under_berts_prefix() -> list[tuple[str, str]]:
    """(config key, model_type) for the keys that change the layer of a family other than
    BERT whose checkpoints name their tensors as BERT's (BigBird's rescale_embeddings)."""
    bert = FAMILIES["bert"]
    return [
        (key, name)
        for name, family in FAMILIES.items()
        if name != "bert" and family.prefix == bert.prefix
        for key in (family.rescale_key, family.sinusoid_key, *family.refuse)
        if key is not None and key not in bert.refuse  # BERT reads it too (Megatron-BERT's)
    ]


def _bert_tensors(names: set, prefix: str) -> bool:
    """Whether names holds each of BERT's embedding tensors (or its legacy name) after prefix."""
    return all(any(prefix + name in names for name in legacy) for legacy in BERT.values())


def expected_tensors(raw: dict, model_type: str, where: str) -> list[str]:
    """The EmbeddingWeights fields this checkpoint must have, from its config."""
    family = family_of(raw, model_type, where)
    fields = []
    for name in family.tensors:
        if name.startswith("projection"):
            if not wants_projection(raw, family, where):
                continue
        elif name == "position_embeddings" and family.position_key:
            if raw.get(family.position_key, "absolute") != "absolute":  # ESM-2's "rotary"
                continue
        elif name in family.optional:
            key, default = family.optional[name]
            if not _flag(raw, key, default, where):
                continue
        fields.append(name)
    return fields


def wants_projection(raw: dict, family: Family, where: str) -> bool:
    if family.projection is None:
        return False
    hidden = _integer(raw, family.hidden_key, where, default=family.sizes[0])
    embedding = _integer(raw, family.embedding_key, where, default=family.sizes[1] or hidden)
    return family.projection_always or hidden != embedding or trigram_input(raw, family, where)


def make_config(
    raw: dict, model_type: str, shapes: dict[str, tuple], where: str
) -> EmbeddingConfig:
    """The layer's settings from config.json, its sizes from the tensors' `shapes` (by
    EmbeddingWeights field); every size config.json states must agree with them."""
    family = family_of(raw, model_type, where)
    sizes = table_sizes(raw, family, shapes, where)
    vocab_size, positions = sizes["vocab_size"], sizes["max_position_embeddings"]
    pad_token_id = pad_id(raw, family, vocab_size, where)
    padding_idx = position_padding_idx(family, pad_token_id, positions, where)
    rescale = family.rescale_key is not None and _flag(raw, family.rescale_key, False, where)
    sinusoidal = family.sinusoid_key is not None and _flag(raw, family.sinusoid_key, False, where)
    return EmbeddingConfig(
        model_type=model_type,
        **sizes,
        layer_norm_eps=layer_norm_eps(raw, family, where),
        pad_token_id=pad_token_id,
        positions="none" if positions is None else family.positions,
        padding_idx=padding_idx,
        position_offset=0 if positions is None else family.position_offset,
        max_length=max_length(raw, family, positions, padding_idx, where),
        word_scale=math.sqrt(sizes["hidden_size"]) if rescale else 1.0,
        projection=family.projection if "projection_weight" in shapes else None,
        sinusoidal=sinusoidal,
        norm=norm_of(raw, family, shapes, where),
        trigram=trigram(raw, family, shapes, where),
        mask_token_id=dropout_mask_id(raw, family, vocab_size, where),
    )


def table_sizes(raw: dict, family: Family, shapes: dict, where: str) -> dict[str, int | None]:
    """V, E, H, P and T from the tensors, checked against what config.json states."""
    vocab_size, embedding_size = shapes["word_embeddings"]
    # H: the projection's output; else the norm's width, or without a norm the tables'
    hidden_size = shapes.get(
        "projection_weight", shapes.get("layer_norm_weight", (embedding_size,))
    )[0]
    positions = shapes.get("position_embeddings", (None,))[0]
    types = shapes.get("token_type_embeddings", (0,))[0]
    # Nystromformer's table has position_offset rows more than its max_position_embeddings
    stated_positions = None if positions is None else positions - family.position_offset
    check_sizes(raw, family, where, vocab_size=vocab_size, hidden=hidden_size,
                embedding_size=embedding_size, max_position_embeddings=stated_positions,
                type_vocab_size=types)  # fmt: skip
    return {
        "vocab_size": vocab_size,
        "embedding_size": embedding_size,
        "hidden_size": hidden_size,
        "max_position_embeddings": positions,
        "type_vocab_size": types,
    }


def trigram_input(raw: dict, family: Family, where: str) -> bool:
    """MobileBERT's trigram_input (true where config.json is silent); False elsewhere."""
    return family.trigram_key is not None and _flag(raw, family.trigram_key, True, where)


def trigram(raw: dict, family: Family, shapes: dict, where: str) -> bool:
    """MobileBERT's trigram_input, its Linear's input width held to it: 3E, or E."""
    if family.trigram_key is None:
        return False
    on = trigram_input(raw, family, where)
    width = (3 if on else 1) * shapes["word_embeddings"][1]
    if "projection_weight" in shapes and shapes["projection_weight"][1] != width:
        raise InputError(
            f"{where}: {family.trigram_key} is {str(on).lower()}, so its Linear takes {width} "
            f"values, but the tensors' has {shapes['projection_weight'][1]}"
        )
    return on


def norm_of(raw: dict, family: Family, shapes: dict, where: str) -> str | None:
    """The layer's norm: None where the checkpoint has none (as its family allows), else
    "layer_norm", or what config.json chooses (MobileBERT's normalization_type)."""
    if "layer_norm_weight" not in shapes:
        return None
    if family.norm_key is None:
        return "layer_norm"
    value = raw.get(family.norm_key, family.norms[0])
    if value not in family.norms:
        raise InputError(
            f"{where}: {family.norm_key} is {value!r}; the model takes "
            + " or ".join(repr(norm) for norm in family.norms)
        )
    return value


def dropout_mask_id(raw: dict, family: Family, vocab_size: int, where: str) -> int | None:
    """ESM's <mask> id where it applies token dropout (token_dropout), else None."""
    if not family.token_dropout or not _flag(raw, "token_dropout", False, where):
        return None
    mask_token_id = _integer(raw, "mask_token_id", where)
    if mask_token_id is None:
        raise InputError(f"{where}: token_dropout is true, but mask_token_id is missing")
    if mask_token_id >= vocab_size:
        raise InputError(
            f"{where}: mask_token_id {mask_token_id} is past the vocabulary ({vocab_size} tokens)"
        )
    return mask_token_id


def check_sizes(raw: dict, family: Family, where: str, *, hidden: int, **sizes) -> None:
    """InputError where config.json states a size the tensors do not have. sizes: by
    config.json's keys; hidden under the family's own key. Token types only where the layer
    has their table (Funnel's are used in attention), embedding_size only where it is read."""
    stated = {"vocab_size": sizes.pop("vocab_size"), family.hidden_key: hidden, **sizes}
    if "token_type_embeddings" not in family.tensors:
        del stated["type_vocab_size"]
    width = stated.pop("embedding_size")
    if family.reads_embedding_size:
        stated[family.embedding_key] = width
    for key, size in stated.items():
        value = _integer(raw, key, where)
        if value is not None and size is not None and value != size:
            raise InputError(f"{where}: {key} is {value}, but the tensors have {size}")


def pad_id(raw: dict, family: Family, vocab_size: int, where: str) -> int | None:
    """config.json's pad_token_id: an explicit null is no pad id, as in transformers; the
    model's default fills only its absence."""
    default = None if "pad_token_id" in raw else family.pad_default
    pad_token_id = _integer(raw, "pad_token_id", where, default=default)
    if pad_token_id is not None and pad_token_id >= vocab_size:
        raise InputError(
            f"{where}: pad_token_id {pad_token_id} is past the vocabulary ({vocab_size} tokens)"
        )
    return pad_token_id


def position_padding_idx(family, pad_token_id, positions, where) -> int | None:
    """RoBERTa-style positions count from padding_idx + 1: the pad id, or MPNet's fixed 1."""
    if family.positions != "padded" or positions is None:
        return None
    padding_idx = family.fixed_padding_idx if family.fixed_padding_idx is not None else pad_token_id
    if padding_idx is None:
        raise InputError(
            f"{where}: pad_token_id is null or missing; this model's positions count from it"
        )
    if padding_idx + 1 >= positions:
        raise InputError(
            f"{where}: padding_idx {padding_idx} leaves no positions in a table of {positions}"
        )
    return padding_idx


def max_length(raw, family, positions, padding_idx, where) -> int | None:
    """Tokens a sequence may have: the position table's rows (RoBERTa: minus padding_idx + 1,
    so 512 of 514), or the model's stated limit (its config's default where config.json is
    silent) where positions are rotary or relative; None for Funnel, which has none."""
    if positions is None:
        if family.max_length_key is None:
            return None
        limit = _integer(raw, family.max_length_key, where, family.max_length_default)
        if limit == 0:
            raise InputError(f"{where}: {family.max_length_key} is 0: no text would fit")
        return limit
    return positions_in(positions, padding_idx, family.position_offset)


def layer_norm_eps(raw: dict, family: Family, where: str) -> float:
    """A finite eps in (0, 1): config.json's, or the model's default (DistilBERT's is fixed)."""
    if family.eps_key is None or family.eps_key not in raw:
        return family.eps_default
    return check_eps(raw[family.eps_key], family.eps_key, where)


def _integer(raw: dict, key: str, where: str, default: int | None = None) -> int | None:
    """A non-negative integer field (not a bool, not 3.0), or default when absent or null."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: {key} is {value!r}; it must be a non-negative integer")
    return value


def _flag(raw: dict, key: str, default, where: str) -> bool:
    """A true/false field; integers count as flags where the model tests them (type_vocab_size)."""
    value = raw.get(key, default)
    if isinstance(default, bool) and not isinstance(value, bool):
        raise InputError(f"{where}: {key} is {value!r}; it must be true or false")
    if not isinstance(default, bool):
        return bool(_integer(raw, key, where, default))
    return value
