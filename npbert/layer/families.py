"""The encoders npbert implements, as data: config.json's model_type -> Family.

A family is a formula (a function in npbert.layer.embedding) plus what is only parameters: where
its tensors are in a checkpoint, how it numbers positions, which config.json key holds
LayerNorm's eps and its default, and what its model's defaults are where config.json is
silent. Each row was read from transformers' modeling and configuration files (5.x) and is
checked against transformers' own modules on a tiny checkpoint (tests/test_families.py).
"""

from dataclasses import replace

from npbert.layer import embedding
from npbert.layer.family import (
    ABSOLUTE_ONLY,
    BERT,
    EMB_LN,
    LAYER_NORM,
    POSITION,
    QUANT_MODE,
    ROBERTA,
    ROBERTA_FORMULA,
    TOKEN_TYPE,
    WORD,
    Family,
    big_bird_formula,
    deberta_formula,
    esm_formula,
    gte_formula,
    mobilebert_formula,
    not_positive,
    projected_after,
    projection,
    truthy,
)

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

# RoBERTa's layer under other names: its positions, its order of addition, its defaults.
for name, prefix, refuse in (
    ("data2vec-text", "data2vec_text", ABSOLUTE_ONLY),
    ("xmod", "roberta", ABSOLUTE_ONLY),  # X-MOD's language adapters are in the encoder
    ("roberta-prelayernorm", "roberta_prelayernorm", ABSOLUTE_ONLY),
    ("ibert", "ibert", ABSOLUTE_ONLY | QUANT_MODE),
):
    FAMILIES[name] = Family(embedding.bert, ROBERTA_FORMULA, prefix, BERT, **ROBERTA, refuse=refuse)
FAMILIES["luke"] = Family(
    embedding.longformer,
    "LayerNorm((W + P) + T), P at padding_idx + 1 + (real tokens before); the word path only "
    "(LUKE's entity embeddings are a second input)",
    "luke",
    BERT,
    **ROBERTA,
)
FAMILIES["splinter"] = replace(FAMILIES["bert"], prefix="splinter", vocab_txt=False)
FAMILIES["bert-generation"] = Family(
    embedding.distilbert, "LayerNorm(W + P)", "bert", WORD | POSITION | LAYER_NORM
)
FAMILIES["convbert"] = Family(
    embedding.longformer,
    "LayerNorm((W + P) + T) at width E, then Linear(E -> H) if E != H",
    "convbert",
    BERT | projection("embeddings_project"),
    pad_default=1,
    projection="after",
    formula_of=projected_after("LayerNorm((W + P) + T) at width E"),
    reads_embedding_size=True,
    sizes=(768, 768),  # ConvBertConfig's
    vocab_txt=True,
)
FAMILIES["rembert"] = Family(
    embedding.bert,
    "LayerNorm((W + T) + P) at width E, then Linear(E -> H)",
    "rembert",
    BERT | projection("encoder.embedding_hidden_mapping_in"),
    projection="after",
    projection_always=True,  # RemBertEncoder maps E -> H whatever the sizes
    reads_embedding_size=True,
    embedding_key="input_embedding_size",
)
# No norm in the layer: it moved into the encoder's layers, which normalize their input.
FAMILIES["megatron-bert"] = Family(
    embedding.megatron,
    "(W + T) + P, not normalized",
    "bert",
    WORD | POSITION | TOKEN_TYPE,
    norms=(None,),
    fast_path=False,
    vocab_txt=True,
    refuse=ABSOLUTE_ONLY,
)
FAMILIES["xlm-roberta-xl"] = Family(
    embedding.megatron,
    "(W + T) + P, P at padding_idx + 1 + (real tokens before), not normalized",
    "roberta",
    WORD | POSITION | TOKEN_TYPE,
    **ROBERTA,
    norms=(None,),
    fast_path=False,
    eps_default=1e-5,
    refuse=ABSOLUTE_ONLY,
)
FAMILIES["esm"] = Family(
    embedding.esm,
    "LayerNorm(dropped(W) + P) * attention_mask; dropped() is token dropout if token_dropout, "
    "P (as RoBERTa's) if position_embedding_type is absolute, the LayerNorm if "
    "emb_layer_norm_before",
    "esm",
    WORD
    | POSITION
    | {"layer_norm_weight": ("embeddings.layer_norm.weight",)}
    | {"layer_norm_bias": ("embeddings.layer_norm.bias",)},
    positions="padded",
    pad_default=None,
    max_length_default=1026,  # EsmConfig's
    optional={
        "layer_norm_weight": ("emb_layer_norm_before", False),
        "layer_norm_bias": ("emb_layer_norm_before", False),
    },
    norms=("layer_norm", None),
    fast_path=False,
    position_key="position_embedding_type",
    token_dropout=True,
    masks_padding=True,
    formula_of=esm_formula,
    no_text=(
        "ESM's tokenizer (EsmTokenizer) is Python code that splits a sequence on its vocabulary, "
        "with no tokenizer.json for the tokenizers library to run"
    ),
)
FAMILIES["fnet"] = Family(
    embedding.fnet,
    "Linear(LayerNorm((W + T) + P)): the Linear(H -> H) is the module's own, after the norm",
    "fnet",
    BERT | projection("embeddings.projection"),
    pad_default=3,
    projection="last",
    projection_always=True,
)
FAMILIES["mobilebert"] = Family(
    embedding.mobilebert,
    "Norm(Linear(trigram(W)) + P + T): trigram(W) the next, this and the previous token's "
    "rows if trigram_input; Linear(3E or E -> H) if trigram_input or E != H; Norm NoNorm "
    "(gamma, beta; no statistics) or LayerNorm (eps 1e-5) as normalization_type says",
    "mobilebert",
    BERT | projection("embeddings.embedding_transformation"),
    eps_key=None,  # its LayerNorm is nn.LayerNorm(hidden_size): torch's default eps
    eps_default=1e-5,
    norms=("no_norm", "layer_norm"),
    norm_key="normalization_type",
    trigram_key="trigram_input",
    projection="words",
    reads_embedding_size=True,
    sizes=(512, 128),  # MobileBertConfig's
    vocab_txt=True,
    formula_of=mobilebert_formula,
)
# Positions from 2: their tables have max_position_embeddings + 2 rows.
for name, eps in (("nystromformer", 1e-5), ("yoso", 1e-12), ("mra", 1e-5)):
    FAMILIES[name] = Family(
        embedding.bert,
        "LayerNorm((W + T) + P), P at 2 + i",
        name,
        BERT,
        position_offset=2,
        eps_default=eps,
        pad_default=1,
        refuse=ABSOLUTE_ONLY,
    )
# Rotary positions, in the attention: the layer is LayerNorm(W + T).
FAMILIES["gte"] = Family(
    embedding.gte,
    "LayerNorm(W + T), LayerNorm(W) where type_vocab_size is 0; positions are rotary",
    "gte",
    WORD | TOKEN_TYPE | LAYER_NORM,
    positions="none",
    pad_default=1,
    max_length_default=8192,  # GteConfig's
    optional={"token_type_embeddings": ("type_vocab_size", 1)},
    formula_of=gte_formula,
)
FAMILIES["jina_embeddings_v3"] = Family(
    embedding.roformer,
    "LayerNorm(W + T); positions are rotary",
    "roberta",
    # stored under jina's own name for the norm, emb_ln, as NomicBERT's
    WORD | TOKEN_TYPE | EMB_LN,
    positions="none",
    eps_default=1e-5,
    pad_default=1,
    max_length_default=8194,  # JinaEmbeddingsV3Config's
)

# NomicBERT's config.json comes in two layouts, each read by its own code: transformers'
# NomicBertConfig (5.x), with BERT's keys and defaults, whose classes save the tensors under
# nomic's names (emb_ln; below "nomic_bert." with a head), and nomic's own code (contrastors),
# a GPT-2 config, as the Hub's nomic-embed-text checkpoints have it.
NOMIC_TRANSFORMERS = Family(
    embedding.roformer,
    "emb_ln(W + T); positions are rotary",
    "nomic_bert",
    WORD | TOKEN_TYPE | EMB_LN,
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
    "tapas": "TAPAS looks up seven token-type tables, from token_type_ids of shape (B, L, 7) that "
    "its tokenizer derives from a table, and restarts positions in each cell; npbert's token "
    "types are one per token",
    "layoutlm": "LayoutLM adds 2-D position embeddings of each token's bounding box (bbox, "
    "(B, L, 4)) from a document's layout, which npbert does not take",
}
