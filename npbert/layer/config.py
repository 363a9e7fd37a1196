"""What the embedding layer of one checkpoint is, apart from its weights: EmbeddingConfig,
and the rules its fields hold to."""

import math
from dataclasses import dataclass

from npbert.errors import InputError
from npbert.layer.families import FAMILIES
from npbert.layer.family import Family


@dataclass(frozen=True)
class EmbeddingConfig:
    """What the embedding layer of one checkpoint is, apart from its weights."""

    model_type: str  # config.json's, e.g. "xlm-roberta"; npbert.layer.families.FAMILIES has its row
    vocab_size: int  # V, rows of the word table
    embedding_size: int  # E, the width of the tables
    hidden_size: int  # H, the model's width: E, but where a projection maps E -> H
    max_position_embeddings: int | None  # P, rows of the position table; None without one
    type_vocab_size: int  # T, rows of the token-type table; 0 without one
    layer_norm_eps: float
    pad_token_id: int | None
    # "absolute": 0..L-1; "padded": RoBERTa's, from padding_idx; "none": no table. (Not the
    # values of transformers' position_embedding_type, where RoBERTa's are "absolute" too.)
    positions: str
    padding_idx: int | None  # where positions == "padded"
    max_length: int | None  # tokens a sequence may have (None: no limit in the layer)
    word_scale: float = 1.0  # BigBird with rescale_embeddings: sqrt(H)
    # "after" the module, "inside" (DeBERTa), "last" (FNet), "words" (MobileBERT), or None
    projection: str | None = None
    position_offset: int = 0  # absolute positions start here (2 in Nystromformer, YOSO, MRA)
    sinusoidal: bool = False  # the position table holds fixed sinusoids, not learned rows
    # "layer_norm"; "no_norm": MobileBERT's scale and shift without statistics; None: no norm
    # (Megatron-BERT; ESM without emb_layer_norm_before)
    norm: str | None = "layer_norm"
    trigram: bool = False  # MobileBERT's trigram_input: each token's row beside its neighbors
    mask_token_id: int | None = None  # ESM's token dropout: its <mask> id; None without it

    def __post_init__(self):
        check_config(self)

    @property
    def family(self) -> Family:
        return FAMILIES[self.model_type]

    @property
    def formula(self) -> str:
        """The family's formula as this checkpoint computes it: a DeBERTa without a position
        table has no P in it, a BigBird that does not rescale no sqrt(H)."""
        family = self.family
        return family.formula if family.formula_of is None else family.formula_of(self)

    @property
    def output_size(self) -> int:
        """The width of the layer's output: E, or H after a projection in the layer (DeBERTa's,
        FNet's, MobileBERT's)."""
        return (
            self.hidden_size
            if self.projection in ("inside", "last", "words")
            else self.embedding_size
        )

    @property
    def first_position(self) -> int:
        """The position row a text's first real token looks up: RoBERTa's padding_idx + 1,
        else position_offset (0; Nystromformer's 2)."""
        return self.position_offset if self.padding_idx is None else self.padding_idx + 1

    @property
    def per_text(self) -> bool:
        """Whether a token's output depends on the other tokens of its text (MobileBERT's
        trigram, ESM's token dropout): texts back to back must go one at a time."""
        return self.trigram or self.mask_token_id is not None


def check_config(config: EmbeddingConfig) -> None:
    """InputError unless the fields hold together as make_config makes them from config.json:
    a config made in code, or changed with dataclasses.replace, is held to the same rules, as a
    wrong field computes silently (a max_length past the position table read rows of the next
    token type)."""
    where = "EmbeddingConfig"
    if not isinstance(config.model_type, str) or config.model_type not in FAMILIES:
        raise unsupported(where, config.model_type)
    for key in ("vocab_size", "embedding_size", "hidden_size", "max_position_embeddings"):
        _size(config, key, minimum=1)
    for key in ("type_vocab_size", "pad_token_id", "padding_idx"):
        _size(config, key, minimum=0)
    _size(config, "max_length", minimum=1)
    if config.pad_token_id is not None and config.pad_token_id >= config.vocab_size:
        raise InputError(f"{where}: pad_token_id {config.pad_token_id} is past the vocabulary")
    check_eps(config.layer_norm_eps, "layer_norm_eps", where)
    _check_positions(config, where)
    family = config.family
    if config.projection not in (None, family.projection):
        raise InputError(f"{where}: projection is {config.projection!r}, not {family.projection!r}")
    scale = config.word_scale
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < math.inf:
        raise InputError(f"{where}: word_scale is {scale!r}, not a positive number")
    if not isinstance(config.sinusoidal, bool):
        raise InputError(f"{where}: sinusoidal is {config.sinusoidal!r}, not True or False")
    _check_norm(config, where)


def _check_norm(config: EmbeddingConfig, where: str) -> None:
    """norm and trigram as the family allows them; mask_token_id only with token dropout."""
    family = config.family
    if config.norm not in family.norms:
        raise InputError(
            f"{where}: norm is {config.norm!r}; {config.model_type}'s layer has "
            + " or ".join(repr(norm) for norm in family.norms)
        )
    if config.trigram not in ((False, True) if family.trigram_key else (False,)):
        raise InputError(f"{where}: trigram is {config.trigram!r}; only MobileBERT's may be True")
    if config.mask_token_id is not None and not family.token_dropout:
        raise InputError(
            f"{where}: mask_token_id is for ESM's token dropout, not {config.model_type}"
        )
    _size(config, "mask_token_id", minimum=0)
    if config.mask_token_id is not None and config.mask_token_id >= config.vocab_size:
        raise InputError(f"{where}: mask_token_id {config.mask_token_id} is past the vocabulary")


OPTIONAL_SIZES = (
    "max_position_embeddings",
    "pad_token_id",
    "padding_idx",
    "max_length",
    "mask_token_id",
)


def _size(config: EmbeddingConfig, key: str, minimum: int) -> None:
    """InputError unless the field is an integer >= minimum, or None where it may be."""
    value = getattr(config, key)
    if value is None and key in OPTIONAL_SIZES:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"EmbeddingConfig: {key} is {value!r}; it must be an integer >= {minimum}")


def _check_positions(config: EmbeddingConfig, where: str) -> None:
    """positions, padding_idx and max_length as the family and the position table give them."""
    table = config.max_position_embeddings
    positions = "none" if table is None else config.family.positions
    if config.positions != positions:
        raise InputError(
            f"{where}: positions is {config.positions!r}; {config.model_type} with "
            f"max_position_embeddings {table} numbers them {positions!r}"
        )
    if (config.padding_idx is None) != (positions != "padded"):
        raise InputError(
            f"{where}: padding_idx is {config.padding_idx!r}, with {positions!r} positions"
        )
    offset = 0 if table is None else config.family.position_offset
    if config.position_offset != offset:
        raise InputError(
            f"{where}: position_offset is {config.position_offset!r}; {config.model_type} with "
            f"max_position_embeddings {table} starts its positions at {offset}"
        )
    limit = None if table is None else positions_in(table, config.padding_idx, offset)
    if limit is not None and not 0 < (config.max_length or 0) <= limit:
        raise InputError(
            f"{where}: max_length is {config.max_length!r}; the position table gives "
            f"{limit} positions, so it must be 1 to {limit}"
        )


def unsupported(where: str, model_type) -> InputError:
    return InputError(
        f"{where}: model_type {model_type!r} is not supported; npbert implements "
        f"{', '.join(sorted(FAMILIES))}"
    )


def positions_in(table: int, padding_idx: int | None, offset: int = 0) -> int:
    """The positions a table of `table` rows gives a sequence: all, RoBERTa's from
    padding_idx + 1 on, or those from `offset` on (Nystromformer's 2)."""
    return table - offset if padding_idx is None else table - padding_idx - 1


def check_eps(eps, key: str, where: str) -> float:
    """eps as a float, or InputError unless it is a number from float32's smallest to 1."""
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise InputError(
            f"{where}: {key} is {eps!r}; it must be a number above 0 and below 1 (1e-12 for BERT)"
        )
    if eps < FLOAT32_TINIEST:  # 0 or not itself in float32: equal values would give 0 / 0
        raise InputError(
            f"{where}: {key} is {eps!r}, below float32's smallest positive number: "
            f"it must be at least {FLOAT32_TINIEST:.3g} (1e-12 for BERT)"
        )
    return float(eps)


FLOAT32_TINIEST = 2.0**-149
