"""What a family of encoders is, as data: the Family record, where its tensors are stored,
and the pieces rows share (npbert.layer.families holds the rows)."""

from collections.abc import Callable
from dataclasses import dataclass, field

# The tensors npbert reads, by EmbeddingWeights field: their names below the model's prefix
# ("bert.", "roberta.", ... in checkpoints saved with a head; none in a bare model), each with
# the legacy names accepted too (bert-base-uncased stores LayerNorm.gamma/.beta).
WORD = {"word_embeddings": ("embeddings.word_embeddings.weight",)}
POSITION = {"position_embeddings": ("embeddings.position_embeddings.weight",)}
TOKEN_TYPE = {"token_type_embeddings": ("embeddings.token_type_embeddings.weight",)}
LAYER_NORM = {
    "layer_norm_weight": ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"),
    "layer_norm_bias": ("embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta"),
}
BERT = WORD | POSITION | TOKEN_TYPE | LAYER_NORM
EMB_LN = {  # the norm outside `embeddings.` (NomicBERT, Jina v3), or where transformers puts it
    "layer_norm_weight": ("emb_ln.weight", "embeddings.LayerNorm.weight"),
    "layer_norm_bias": ("emb_ln.bias", "embeddings.LayerNorm.bias"),
}


def projection(stem: str, bias: bool = True) -> dict[str, tuple[str, ...]]:
    """The Linear(E -> H) tensors of a model whose embedding width E differs from H."""
    names = {"projection_weight": (f"{stem}.weight",)}
    return names | ({"projection_bias": (f"{stem}.bias",)} if bias else {})


@dataclass(frozen=True)
class Family:
    """How one model_type's embedding layer is computed and stored."""

    layer: Callable  # the formula, from npbert.layer.embedding
    formula: str  # as explain and the README show it
    prefix: str  # transformers' base_model_prefix
    tensors: dict[str, tuple[str, ...]]  # every tensor the layer may read, as above
    positions: str = "absolute"  # "absolute": 0..L-1; "padded": RoBERTa's; "none": no table
    fixed_padding_idx: int | None = None  # MPNet counts positions from 1, whatever pad_token_id
    # Where "absolute" positions start: 2 in Nystromformer, YOSO and MRA, whose position tables
    # are two rows longer than max_position_embeddings and whose models never read rows 0 and 1.
    position_offset: int = 0
    # The norms its layer may have (EmbeddingConfig.norm): None where it moved to the encoder's
    # layers; MobileBERT's config.json chooses under norm_key
    norms: tuple = ("layer_norm",)
    norm_key: str | None = None
    trigram_key: str | None = None  # MobileBERT's trigram_input
    # False: npbert.layer.fast runs the specification, a pass of elementwise steps, for layers
    # its restructuring does not cover (no norm; ESM's token dropout)
    fast_path: bool = True
    # ESM: its position table exists only where this config key is "absolute" (else rotary)
    position_key: str | None = None
    token_dropout: bool = False  # ESM: reads token_dropout and mask_token_id
    eps_key: str | None = "layer_norm_eps"  # None: fixed in the model's code
    eps_default: float = 1e-12
    pad_default: int | None = 0  # pad_token_id when config.json has none
    hidden_key: str = "hidden_size"
    # The model's limit on tokens where it has no position table, and its config's default
    # for it; key None: the model has no limit (Funnel's attention takes any length).
    max_length_key: str | None = "max_position_embeddings"
    max_length_default: int | None = None
    # Tensors that exist only when a config key is true (non-zero), with the key's default.
    optional: dict[str, tuple[str, object]] = field(default_factory=dict)
    # the Linear to H: "after" the module (ALBERT, ELECTRA, RoFormer, ConvBERT, RemBERT),
    # "inside" it before the norm (DeBERTa), "last" in it, after the norm (FNet), or of the
    # "words" before the other rows are added (MobileBERT's embedding_transformation)
    projection: str | None = None
    projection_always: bool = False  # ALBERT projects even when E == H
    # Where config.json is silent on the sizes that decide a projection, the model's own
    # defaults decide it, as in transformers: H, and E (None: E = H).
    sizes: tuple[int, int | None] = (768, None)
    # Whether its model sizes the tables by config.json's embedding_size (ALBERT, ELECTRA,
    # RoFormer, DeBERTa, SqueezeBERT): elsewhere the key is read by nothing, and not checked.
    reads_embedding_size: bool = False
    embedding_key: str = "embedding_size"  # where config.json has E (RemBERT: input_embedding_size)
    rescale_key: str | None = None  # BigBird: scale the word rows by sqrt(H) when this is true
    sinusoid_key: str | None = None  # DistilBERT: the position table holds fixed sinusoids if true
    # The formula as one checkpoint computes it, where config.json decides parts of it:
    # f(EmbeddingConfig) -> str (EmbeddingConfig.formula); None: `formula` as it is.
    formula_of: Callable | None = None
    masks_padding: bool = False  # DeBERTa multiplies its output by attention_mask
    dropout_after: str = "embeddings"  # the stage dropout follows (BigBird: before LayerNorm)
    vocab_txt: bool = False  # its tokenizer is BERT's WordPiece, so a vocab.txt alone will do
    no_text: str | None = None  # why its text is refused: a tokenizer the library cannot run
    # (key, family): a config.json that has `key` is another code's layout of the same layer,
    # read with `family`, its settings under other keys with other defaults (NomicBERT: nomic's
    # own GPT-2-style config has n_embd).
    other_layout: tuple[str, "Family"] | None = None
    # Settings under which the model computes something npbert does not, refused with the
    # reason: {config key: (default where config.json is silent, refused(value) -> bool, why)}
    refuse: dict[str, tuple[object, Callable[[object], bool], str]] = field(default_factory=dict)


def truthy(value) -> bool:
    """What the model's own code does with the flag: `if config.key:`."""
    return bool(value)


def not_positive(value) -> bool:
    """NomicBERT's rotary_emb_fraction: a learned position table unless it is a number > 0."""
    return isinstance(value, bool) or not isinstance(value, int | float) or not value > 0


def big_bird_formula(config) -> str:
    word = "W" if config.word_scale == 1 else "W * sqrt(H)"
    return f"LayerNorm(({word} + T) + P)"


def projected_after(layer: str, note: str = ""):
    """ELECTRA's and RoFormer's formula: the layer, then Linear(E -> H) where E != H."""
    return lambda config: layer + (", then Linear(E -> H)" if config.projection else "") + note


def deberta_formula(config) -> str:
    # the rows added in DeBERTa's order, (W + P) + T, each table where it has one
    terms = [
        "W",
        *(["P"] if config.positions != "none" else []),
        *(["T"] if config.type_vocab_size else []),
    ]
    x = " + ".join(terms[:2])
    if len(terms) == 3:
        x = f"({x}) + {terms[2]}"
    if config.projection == "inside":
        x = f"embed_proj({x})"
    return f"LayerNorm({x}) * attention_mask"


def gte_formula(config) -> str:
    terms = "W + T" if config.type_vocab_size else "W"
    return f"LayerNorm({terms}); positions are rotary"


def esm_formula(config) -> str:
    x = "dropped(W)" if config.mask_token_id is not None else "W"
    x = f"{x} + P" if config.positions != "none" else x
    x = f"LayerNorm({x})" if config.norm else x
    in_attention = "; no position table (rotary or relative positions, in attention)"
    return f"{x} * attention_mask" + (in_attention if config.positions == "none" else "")


def mobilebert_formula(config) -> str:
    x = "trigram(W)" if config.trigram else "W"
    x = f"Linear({x})" if config.projection else x
    norm = "LayerNorm" if config.norm == "layer_norm" else "NoNorm"
    return f"{norm}({x} + P + T)"


def not_absolute(value) -> bool:
    return value != "absolute"


# The families whose transformers 4 layer read position_embedding_type (BERT's and its
# copies': `if self.position_embedding_type == "absolute": embeddings += position_embeddings`).
# transformers 5 reads no such key and always adds the table. Longformer and BigBird stored the
# key but added the table whatever it said; the other families never read it.
ABSOLUTE_ONLY = {
    "position_embedding_type": (
        "absolute",
        not_absolute,
        "transformers 4 left the position table out of this layer for any type but "
        "'absolute' (null too), transformers 5 adds it, so which layer the checkpoint was "
        "trained with is not known; npbert implements learned absolute positions",
    )
}
QUANT_MODE = {
    "quant_mode": (
        False,
        truthy,
        "I-BERT's integer-only mode quantizes the tables and computes its LayerNorm in "
        "integers; npbert implements its floating-point layer (quant_mode false)",
    )
}
ROBERTA = {"positions": "padded", "pad_default": 1}
ROBERTA_FORMULA = "LayerNorm((W + T) + P), P at padding_idx + 1 + (real tokens before)"
