"""The `npbert` command: embed, explain, compare, vectors, inspect, fetch.

Bad input exits 2 with one line naming what is wrong; a traceback is a bug.
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.errors import InputError
from npbert.verify import DEFAULT_ATOL, DEFAULT_RTOL


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # TEXT arguments may come after the options (`compare C --model M TEXT`); argparse leaves
    # those over, and they are texts as long as none looks like an option.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "texts") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.texts = [*args.texts, *extra]
    try:
        return args.run(args)
    except InputError as error:
        print(f"npbert: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # an unreadable input or unwritable output file
        print(f"npbert: error: {error.strerror or error}: {error.filename or ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("npbert: interrupted", file=sys.stderr)
        return 130


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line, like every other npbert error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="npbert", description="BERT's embedding layer in NumPy.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    embed = commands.add_parser("embed", help="embed texts or ids")
    add_inputs(embed)
    embed.add_argument(
        "--out", type=Path, metavar="FILE", help=".npz (embeddings and inputs) or .npy"
    )
    embed.add_argument(
        "--stages", action="store_true", help="also write every stage of the layer (.npz)"
    )
    corpus = embed.add_argument_group("corpus", "stream a corpus into a directory of shards")
    corpus.add_argument("--input", metavar="FILE", help=".txt (a text a line), .jsonl, or -")
    corpus.add_argument(
        "--input-format", choices=("txt", "jsonl"), help="default: from the file name, txt for -"
    )
    corpus.add_argument("--batch-size", type=int, default=32, metavar="N")
    corpus.add_argument(
        "--shard-tokens",
        type=int,
        default=16384,
        metavar="N",
        help="tokens per shard (memory use grows with it)",
    )
    corpus.add_argument("--resume", action="store_true", help="continue an interrupted run")
    embed.set_defaults(run=run_embed)

    explain = commands.add_parser("explain", help="walk through the layer for one text")
    explain.add_argument("text", metavar="TEXT")
    add_model(explain)
    explain.add_argument("--pair", metavar="TEXT", help="sentence B")
    explain.add_argument("--truncate", action="store_true")
    explain.set_defaults(run=run_explain)

    compare = commands.add_parser("compare", help="check another implementation's output")
    compare.add_argument(
        "candidate", type=Path, metavar="CANDIDATE", help=".npy, .npz, .safetensors or .json"
    )
    add_inputs(compare)
    compare.add_argument("--atol", type=float, default=DEFAULT_ATOL, help="default %(default)g")
    compare.add_argument("--rtol", type=float, default=DEFAULT_RTOL, help="default %(default)g")
    compare.add_argument("--json", action="store_true", help="the report as JSON")
    compare.set_defaults(run=run_compare)

    vectors = commands.add_parser("vectors", help="write conformance vectors")
    add_model(vectors)
    vectors.add_argument("--out", type=Path, required=True, metavar="DIR")
    vectors.set_defaults(run=run_vectors)

    inspect = commands.add_parser("inspect", help="the five embedding tensors of a checkpoint")
    inspect.add_argument("model", metavar="MODEL", help="checkpoint directory or Hub repo id")
    add_revision(inspect)
    inspect.set_defaults(run=run_inspect)

    fetch = commands.add_parser("fetch", help="fetch a Hub model's embedding tensors")
    fetch.add_argument("model", metavar="MODEL", help="Hub repo id")
    add_revision(fetch)
    fetch.add_argument("--token", help="Hub token (default: HF_TOKEN or `hf auth login`'s)")
    fetch.add_argument("--cache-dir", metavar="DIR", help="Hub cache (default: HF_HUB_CACHE)")
    fetch.add_argument(
        "--offline",
        action="store_true",
        help="no request: check the cached copy only (as HF_HUB_OFFLINE=1)",
    )
    fetch.add_argument(
        "--quiet", action="store_true", help="no progress bars; print only the cache path"
    )
    fetch.set_defaults(run=run_fetch)
    return parser


def add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, metavar="M", help="checkpoint directory or Hub repo id"
    )
    add_revision(parser)


def add_revision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", help="Hub branch, tag or commit sha")
    parser.add_argument(
        "--full", action="store_true", help="download the whole weights file from the Hub"
    )


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """TEXT arguments (with --pair, --truncate) or --ids-file, and the model."""
    parser.add_argument("texts", nargs="*", metavar="TEXT")
    add_model(parser)
    parser.add_argument(
        "--pair", action="append", metavar="TEXT", help="sentence B, once per TEXT (repeatable)"
    )
    parser.add_argument("--truncate", action="store_true", help="cut texts to max positions")
    parser.add_argument("--ids-file", type=Path, metavar="IDS.npy", help="(L,) or (B, L) int ids")
    parser.add_argument("--token-type-ids-file", type=Path, metavar="TT.npy")


@dataclass
class Inputs:
    """What to embed: weights and (B, L) ids, from texts or from .npy files."""

    weights: object
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None
    arrays: dict  # input arrays to save beside the embeddings
    meta: dict  # what went in, for the output's metadata
    tokens: list | None = None
    texts: list | None = None


def read_inputs(args) -> Inputs:
    from npbert.model import Embedder, load_weights

    hub = {"revision": args.revision, "full": args.full}
    if args.ids_file is not None:
        if args.texts or args.pair:
            raise InputError("give TEXT arguments or --ids-file, not both")
        input_ids = load_ids(args.ids_file, "--ids-file")
        token_type_ids = None
        if args.token_type_ids_file is not None:
            token_type_ids = load_ids(args.token_type_ids_file, "--token-type-ids-file")
        arrays = {"input_ids": input_ids}
        if token_type_ids is not None:
            arrays["token_type_ids"] = token_type_ids
        weights = load_weights(args.model, **hub)
        return Inputs(weights, input_ids, token_type_ids, arrays, {"ids_file": str(args.ids_file)})
    if args.token_type_ids_file is not None:
        raise InputError("--token-type-ids-file goes with --ids-file")
    if not args.texts:
        raise InputError("nothing to embed: give TEXT arguments or --ids-file")
    if args.pair and len(args.pair) != len(args.texts):
        raise InputError(f"{len(args.texts)} TEXT arguments but {len(args.pair)} --pair")
    embedder = Embedder.from_pretrained(args.model, **hub)
    encoding = embedder.encode(args.texts, args.pair, truncation=args.truncate)
    arrays = {
        "input_ids": encoding.input_ids,
        "token_type_ids": encoding.token_type_ids,
        "attention_mask": encoding.attention_mask,
    }
    meta = {"texts": args.texts, "pairs": args.pair}
    return Inputs(
        embedder.weights,
        encoding.input_ids,
        encoding.token_type_ids,
        arrays,
        meta,
        encoding.tokens,
        args.texts,
    )


def run_embed(args) -> int:
    from npbert.model import embed, embed_stages

    if args.input is not None:
        return run_embed_corpus(args)

    if args.stages and (args.out is None or args.out.suffix != ".npz"):
        raise InputError("--stages writes every stage to an .npz: give --out FILE.npz")
    inputs = read_inputs(args)
    if args.stages:
        outputs = embed_stages(inputs.weights, inputs.input_ids, inputs.token_type_ids)
    else:
        outputs = {"embeddings": embed(inputs.weights, inputs.input_ids, inputs.token_type_ids)}
    if args.out is not None:
        return save(args.out, {**outputs, **inputs.arrays}, metadata(inputs.weights, **inputs.meta))
    embeddings = outputs["embeddings"]
    print(
        summary(
            inputs.weights, embeddings, inputs.tokens, inputs.texts, np.atleast_2d(inputs.input_ids)
        )
    )
    return 0


def run_embed_corpus(args) -> int:
    from npbert.model import Embedder
    from npbert.stream import embed_corpus

    if args.texts or args.ids_file or args.pair or args.stages:
        raise InputError("--input embeds a whole file: give no TEXT, --pair, --ids-file, --stages")
    if args.out is None:
        raise InputError("--input needs --out DIR, the directory the shards go to")
    if args.batch_size < 1 or args.shard_tokens < 1:
        raise InputError("--batch-size and --shard-tokens must be at least 1")
    input_format = args.input_format or ("jsonl" if args.input.endswith(".jsonl") else "txt")
    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    index = embed_corpus(
        embedder,
        args.input,
        args.out,
        input_format=input_format,
        batch_size=args.batch_size,
        shard_tokens=args.shard_tokens,
        truncation=args.truncate,
        resume=args.resume,
        progress=sys.stderr.isatty(),
    )
    print(
        f"embedded {index['texts']:,} texts, {index['tokens']:,} tokens, in "
        f"{len(index['shards'])} shards: {args.out}"
    )
    return 0


def run_compare(args) -> int:
    from npbert.model import embed_stages
    from npbert.verify import compare, format_report, load_candidate

    candidate = load_candidate(args.candidate)
    inputs = read_inputs(args)
    references = [
        embed_stages(inputs.weights, inputs.input_ids, inputs.token_type_ids, dtype=dtype)
        for dtype in (np.float64, np.float32)
    ]
    report = compare(candidate, *references, atol=args.atol, rtol=args.rtol)
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    return 0 if report["ok"] else 1


def run_vectors(args) -> int:
    from npbert.model import Embedder
    from npbert.vectors import write_vectors

    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    manifest = write_vectors(embedder, args.out)
    print(f"wrote {len(manifest['cases'])} cases to {args.out} (manifest.json, FORMAT.md)")
    return 0


def load_ids(path: Path, name: str) -> np.ndarray:
    """An .npy of ids, never unpickled."""
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as error:  # object arrays need pickle; not a valid .npy
        raise InputError(f"{name} {path}: not a readable .npy array ({error})") from None
    if not isinstance(array, np.ndarray):
        array.close()
        raise InputError(f"{name} {path}: an .npz archive; give one array as .npy")
    return array


def metadata(weights, **inputs) -> dict:
    from npbert import __version__

    return {
        "npbert": __version__,
        **weights.source,
        **inputs,
        "layer_norm_eps": weights.layer_norm_eps,
    }


def save(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> int:
    """Write .npz (all arrays and a `metadata` JSON string) or .npy (embeddings), atomically:
    a temporary file renamed into place, so an interrupted run leaves no partial file."""
    if path.suffix not in (".npz", ".npy"):
        raise InputError(f"--out {path}: use a .npz or .npy file name")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"--out {path}: directory {directory} does not exist")
    from npbert.atomic import write_atomically

    if path.suffix == ".npz":
        write_atomically(path, lambda f: np.savez(f, **arrays, metadata=np.array(json.dumps(meta))))
    else:
        write_atomically(path, lambda f: np.save(f, arrays["embeddings"]))
    shape = arrays["embeddings"].shape
    print(f"wrote {path}: embeddings {shape} {arrays['embeddings'].dtype}")
    return 0


def summary(weights, embeddings: np.ndarray, tokens, texts, ids=None) -> str:
    """A few readable lines: the model, the shape, and per sequence its tokens and end rows."""
    from npbert.explain import format_row

    batch = embeddings if embeddings.ndim == 3 else embeddings[None]  # (B, L, H)
    lines = [
        f"model: {weights.source.get('model')}  (vocab {weights.vocab_size}, hidden "
        f"{weights.hidden_size}, {weights.max_position_embeddings} positions, "
        f"{weights.type_vocab_size} token types, eps {weights.layer_norm_eps:g})",
        f"embeddings: {embeddings.shape} {embeddings.dtype}",
    ]
    for b, rows in enumerate(batch):
        lines.append("")
        if texts is not None:
            real = [t for t in tokens[b] if t != "[PAD]"] if tokens else []
            lines.append(f"[{b}] {texts[b]}")
            lines.append(f"    {len(real)} tokens: {' '.join(real)}")
            lines.append(f"    input_ids: {' '.join(map(str, ids[b, : len(real)]))}")
            last = len(real) - 1
        else:
            lines.append(f"[{b}] {rows.shape[0]} tokens")
            last = rows.shape[0] - 1
        lines.append(f"    first {format_row(rows[0])}")
        lines.append(f"    last  {format_row(rows[last])}")
    return "\n".join(lines)


def run_explain(args) -> int:
    from npbert.explain import TOLERANCE, explain
    from npbert.model import Embedder

    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    pairs = None if args.pair is None else [args.pair]
    encoding = embedder.encode([args.text], pairs, truncation=args.truncate)
    print(f"model: {embedder.weights.source.get('model')}")
    text, diff = explain(
        embedder.weights, encoding.tokens[0], encoding.input_ids[0], encoding.token_type_ids[0]
    )
    print(text)
    return 0 if diff <= TOLERANCE else 1


def run_inspect(args) -> int:
    from npbert.checkpoint import check_shapes, find_embedding_tensors, read_config
    from npbert.model import resolve

    directory, source = resolve(args.model, revision=args.revision, full=args.full)
    config = read_config(directory)
    tensors = find_embedding_tensors(directory)
    check_shapes(tensors, config, directory)
    width = max(len(t.name) for t in tensors.values())
    print(
        f"model: {source.get('model')}" + (f" @ {source['commit']}" if "commit" in source else "")
    )
    print(f"{'tensor':<{width}}  {'shape':<14} {'dtype':<5} {'bytes':>12}  file")
    for stored in tensors.values():
        print(
            f"{stored.name:<{width}}  {stored.shape!s:<14} {stored.dtype:<5} "
            f"{stored.nbytes:>12,}  {stored.file.name}"
        )
    print(f"embedding tensors: {sum(t.nbytes for t in tensors.values()):,} bytes")
    print(f"layer_norm_eps: {config.get('layer_norm_eps', 1e-12):g}")
    print(f"max_position_embeddings: {tensors['position_embeddings'].shape[0]}")
    print(f"type_vocab_size: {tensors['token_type_embeddings'].shape[0]}")
    print(f"vocab_size: {tensors['word_embeddings'].shape[0]}")
    print(f"hidden_size: {tensors['word_embeddings'].shape[1]}")
    return 0


def run_fetch(args) -> int:
    from npbert import hub

    if Path(args.model).expanduser().is_dir():
        raise InputError(f"{args.model} is a local directory; fetch takes a Hub repo id")
    if args.quiet:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()  # huggingface_hub's and npbert's bars alike
    fetched = hub.fetch(
        args.model,
        revision=args.revision,
        full=args.full,
        token=args.token,
        cache_dir=args.cache_dir,
        local_files_only=args.offline,
    )
    if args.quiet:
        print(fetched.directory)
        return 0
    source = fetched.source
    print(f"{source['model']} at {source['commit']} ({source['revision']})")
    if fetched.repaired:
        print(f"repaired: the cached copy was damaged ({fetched.repaired})")
    if fetched.cached:
        print(f"already cached: nothing downloaded ({source['weights']})")
    else:
        share = fetched.fetched_bytes / fetched.full_bytes if fetched.full_bytes else 1.0
        print(
            f"downloaded {fetched.fetched_bytes:,} bytes of weights out of {fetched.full_bytes:,}"
            f" ({share:.1%}): {source['weights']}"
        )
    print(f"cached in {fetched.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
