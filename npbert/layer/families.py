"""The encoders npbert implements, as data: config.json's model_type -> Family.

A family is a formula (a function in npbert.layer.embedding) plus what is only parameters: where
its tensors are in a checkpoint, how it numbers positions, which config.json key holds
LayerNorm's eps and its default, and what its model's defaults are where config.json is
silent. Each row was read from transformers' modeling and configuration files (5.x) and is
checked against transformers' own modules on a tiny checkpoint (tests/test_families.py).
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from npbert.layer import embedding

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
    projection: str | None = None  # "after" the module (ALBERT, ELECTRA, RoFormer) or "inside"
    projection_always: bool = False  # ALBERT projects even when E == H
    # Where config.json is silent on the sizes that decide a projection, the model's own
    # defaults decide it, as in transformers: H, and E (None: E = H).
    sizes: tuple[int, int | None] = (768, None)
    # Whether its model sizes the tables by config.json's embedding_size (ALBERT, ELECTRA,
    # RoFormer, DeBERTa, SqueezeBERT): elsewhere the key is read by nothing, and not checked.
    reads_embedding_size: bool = False
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
ROBERTA = {"positions": "padded", "pad_default": 1}
ROBERTA_FORMULA = "LayerNorm((W + T) + P), P at padding_idx + 1 + (real tokens before)"

FAMILIES: dict[str, Family] = {
    "bert": Family(
        embedding.bert,
        "LayerNorm((W + T) + P)",
        "bert",
        BERT,
        vocab_txt=True,
        refuse=ABSOLUTE_ONLY,
    ),
    "ernie": Family(
        embedding.bert,
        "LayerNorm((W + T) + P)",
        "ernie",
        BERT,
        vocab_txt=True,
        refuse={
            "use_task_id": (False, truthy, "it adds task-type embeddings, which npbert lacks"),
            **ABSOLUTE_ONLY,
        },
    ),
    "squeezebert": Family(
        embedding.longformer,
        "LayerNorm((W + P) + T)",
        "transformer",
        BERT,
        vocab_txt=True,
        reads_embedding_size=True,  # and its model asserts it equals hidden_size
    ),
    "roberta": Family(
        embedding.bert, ROBERTA_FORMULA, "roberta", BERT, **ROBERTA, refuse=ABSOLUTE_ONLY
    ),
    "xlm-roberta": Family(
        embedding.bert, ROBERTA_FORMULA, "roberta", BERT, **ROBERTA, refuse=ABSOLUTE_ONLY
    ),
    "camembert": Family(
        embedding.bert, ROBERTA_FORMULA, "roberta", BERT, **ROBERTA, refuse=ABSOLUTE_ONLY
    ),
    "longformer": Family(
        embedding.longformer,
        "LayerNorm((W + P) + T), P at padding_idx + 1 + (real tokens before)",
        "longformer",
        BERT,
        **ROBERTA,
    ),
    "big_bird": Family(
        embedding.big_bird,
        "LayerNorm((W * s + T) + P), s = sqrt(H) if rescale_embeddings, else 1",
        "bert",
        BERT,
        rescale_key="rescale_embeddings",
        formula_of=big_bird_formula,
        dropout_after="sum",
    ),
    "distilbert": Family(
        embedding.distilbert,
        "LayerNorm(W + P)",
        "distilbert",
        WORD | POSITION | LAYER_NORM,
        eps_key=None,  # nn.LayerNorm(config.dim, eps=1e-12) in DistilBERT's code
        hidden_key="dim",
        sinusoid_key="sinusoidal_pos_embds",
        vocab_txt=True,
    ),
    "albert": Family(
        embedding.bert,
        "LayerNorm((W + T) + P) at width E, then Linear(E -> H)",
        "albert",
        BERT | projection("encoder.embedding_hidden_mapping_in"),
        projection="after",
        projection_always=True,  # so sizes, which decide where a projection is, are not read
        reads_embedding_size=True,
        refuse=ABSOLUTE_ONLY,
    ),
    "electra": Family(
        embedding.bert,
        "LayerNorm((W + T) + P) at width E, then Linear(E -> H) if E != H",
        "electra",
        BERT | projection("embeddings_project"),
        projection="after",
        formula_of=projected_after("LayerNorm((W + T) + P) at width E"),
        reads_embedding_size=True,
        sizes=(256, 128),  # ElectraConfig's: a small model's, projected
        vocab_txt=True,
        refuse=ABSOLUTE_ONLY,
    ),
    "roformer": Family(
        embedding.roformer,
        "LayerNorm(W + T) at width E, then Linear(E -> H) if E != H; positions are rotary",
        "roformer",
        WORD | TOKEN_TYPE | LAYER_NORM | projection("embeddings_project"),
        positions="none",
        max_length_default=1536,  # RoFormerConfig's
        projection="after",
        formula_of=projected_after("LayerNorm(W + T) at width E", "; positions are rotary"),
        reads_embedding_size=True,
        # transformers' RoFormerTokenizer runs jieba (rjieba) in Python, and saves BERT's
        # pre-tokenizer in its place: read from tokenizer.json, Chinese words become [UNK].
        no_text=(
            "RoFormer's tokenizer splits words with jieba, which the tokenizers library cannot "
            "run (a tokenizer.json saved by transformers holds BERT's pre-tokenizer in its "
            "place, and gives [UNK] for Chinese words)"
        ),
    ),
    "mpnet": Family(
        embedding.distilbert,
        "LayerNorm(W + P), P at 2 + (real tokens before)",
        "mpnet",
        WORD | POSITION | LAYER_NORM,
        positions="padded",
        fixed_padding_idx=1,  # MPNetEmbeddings sets self.padding_idx = 1
        pad_default=1,
    ),
    "deberta": Family(
        embedding.deberta,
        "LayerNorm(embed_proj((W + P) + T)) * attention_mask; P if position_biased_input, T if "
        "type_vocab_size > 0, embed_proj (no bias) if E != H",
        "deberta",
        BERT | projection("embeddings.embed_proj", bias=False),
        eps_default=1e-7,
        max_length_default=512,  # DebertaConfig's and DebertaV2Config's, read without P
        optional={
            "position_embeddings": ("position_biased_input", True),
            "token_type_embeddings": ("type_vocab_size", 0),
        },
        projection="inside",
        masks_padding=True,
        reads_embedding_size=True,
        formula_of=deberta_formula,
    ),
    "modernbert": Family(
        embedding.modernbert,
        "LayerNorm(W), no bias unless norm_bias; positions are rotary",
        "model",
        {
            "word_embeddings": ("embeddings.tok_embeddings.weight",),
            "layer_norm_weight": ("embeddings.norm.weight",),
            "layer_norm_bias": ("embeddings.norm.bias",),
        },
        positions="none",
        max_length_default=8192,  # ModernBertConfig's
        eps_key="norm_eps",
        eps_default=1e-5,
        pad_default=50283,
        optional={"layer_norm_bias": ("norm_bias", False)},
    ),
    "funnel": Family(
        embedding.modernbert,
        "LayerNorm(W); token types and positions are used in attention",
        "funnel",
        WORD
        | {
            "layer_norm_weight": ("embeddings.layer_norm.weight",),
            "layer_norm_bias": ("embeddings.layer_norm.bias",),
        },
        positions="none",
        max_length_key=None,
        eps_default=1e-9,
        pad_default=None,
        hidden_key="d_model",
    ),
}
FAMILIES["deberta-v2"] = replace(FAMILIES["deberta"], sizes=(1536, None))

# NomicBERT's config.json comes in two layouts, each read by its own code: transformers'
# NomicBertConfig (5.x), with BERT's keys and defaults, whose classes save the tensors under
# nomic's names (emb_ln; below "nomic_bert." with a head), and nomic's own code (contrastors),
# a GPT-2 config, as the Hub's nomic-embed-text checkpoints have it.
NOMIC_TRANSFORMERS = Family(
    embedding.roformer,
    "emb_ln(W + T); positions are rotary",
    "nomic_bert",
    WORD
    | TOKEN_TYPE
    | {"layer_norm_weight": ("emb_ln.weight", "embeddings.LayerNorm.weight")}
    | {"layer_norm_bias": ("emb_ln.bias", "embeddings.LayerNorm.bias")},
    positions="none",
    max_length_default=2048,  # NomicBertConfig's
    vocab_txt=True,
)
NOMIC_CONTRASTORS = replace(
    NOMIC_TRANSFORMERS,
    prefix="",
    tensors=WORD
    | TOKEN_TYPE
    | {"layer_norm_weight": ("emb_ln.weight",)}
    | {"layer_norm_bias": ("emb_ln.bias",)},
    eps_key="layer_norm_epsilon",
    eps_default=1e-5,  # its NomicBertConfig extends GPT2Config, whose default this is
    hidden_key="n_embd",
    max_length_key="n_positions",
    max_length_default=1024,  # GPT2Config's
    optional={"token_type_embeddings": ("type_vocab_size", 2)},
    refuse={  # (prenorm changes the layers only: emb_ln(W + T) comes first either way)
        # its NomicBertConfig's default is 0.0: a learned position table, not rotary positions
        "rotary_emb_fraction": (
            0.0,
            not_positive,
            "without rotary positions it adds a position table",
        ),
    },
)
FAMILIES["nomic_bert"] = replace(NOMIC_TRANSFORMERS, other_layout=("n_embd", NOMIC_CONTRASTORS))

# model_types that look close but compute something else: refused with the reason.
REFUSED = {
    "xlm": "XLM adds language embeddings and looks token types up in the word table",
    "mobilebert": "MobileBERT embeds trigrams of tokens and normalizes with NoNorm",
    "xlm-roberta-xl": "XLM-RoBERTa-XL has no LayerNorm in its embeddings (it moved to the layers)",
    "megatron-bert": "Megatron-BERT has no LayerNorm in its embeddings (it moved to the layers)",
}
