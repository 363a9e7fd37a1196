"""npbert embed --input: a corpus streamed into a directory of shards."""

import argparse
import os
import sys

from npbert.cli.inputs import check_float32
from npbert.cli.options import ID_FILES, count
from npbert.cli.output import say
from npbert.errors import InputError

# The corpus options, and what each is when not given: given without --input, refused.
CORPUS_DEFAULTS = {
    "input_format": None,
    "shard_bytes": 1 << 16,
    "dtype": "float32",
    "resume": False,
    "workers": None,
    "engine": "local",
    "address": None,
    "quiet": False,
}


def add_corpus_options(embed: argparse.ArgumentParser) -> None:
    """`embed --input`: a corpus streamed into a directory of shards, on this machine's cores
    or on a Ray cluster."""
    corpus = embed.add_argument_group("corpus", "stream a corpus into a directory of shards")
    corpus.add_argument(
        "--input",
        metavar="FILE|DIR",
        help=".txt (a text a line), .jsonl, .parquet, a directory of them, or - for stdin",
    )
    corpus.add_argument(
        "--input-format",
        choices=("txt", "jsonl", "parquet"),
        help="default: from each file's name, txt for -",
    )
    corpus.add_argument(
        "--shard-bytes",
        type=count,
        default=CORPUS_DEFAULTS["shard_bytes"],
        metavar="N",
        help="bytes of input per shard (default: %(default)s, about 16k tokens of English "
        "text); memory use grows with it",
    )
    corpus.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default=CORPUS_DEFAULTS["dtype"],
        help="of the embeddings written (default: %(default)s); float16 is half the size",
    )
    corpus.add_argument("--resume", action="store_true", help="continue an interrupted run")
    corpus.add_argument(
        "--workers",
        type=count,
        metavar="N",
        help="processes (local; at most 4 per core) or actors (ray); default: one per core "
        "(per CPU of the cluster)",
    )
    corpus.add_argument(
        "--engine",
        choices=("local", "ray"),
        default=CORPUS_DEFAULTS["engine"],
        help="local worker processes or a Ray cluster (needs npbert[ray]) (default: %(default)s)",
    )
    corpus.add_argument(
        "--address",
        help="--engine ray: the cluster to join (default: RAY_ADDRESS's, else start one here)",
    )
    corpus.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run_embed_corpus(args) -> int:
    files = [text for text in args.texts if os.path.exists(text)]
    if files:  # `--input parts/*.txt`: the shell gave the files after the first as TEXTs
        raise InputError(
            f"--input takes one file or directory, and {files[0]} came as a TEXT after it: to "
            "embed several files, give the directory that holds them"
        )
    given = [o for o in ID_FILES.values() if getattr(args, o) is not None]  # --ids-file, ...
    if args.texts or given or args.pair or args.stages or args.project:
        raise InputError(
            "--input embeds a whole file: give no TEXT, --pair, --ids-file (or its token type, "
            "position or mask file), --stages, --project"
        )
    if args.out is None:
        raise InputError("--input needs --out DIR, the directory the shards go to")
    if args.address is not None and args.engine != "ray":
        raise InputError("--address goes with --engine ray")
    progress = None if args.quiet else "bar" if sys.stderr.isatty() else "lines"
    options = {
        "input_format": args.input_format,
        "shard_bytes": args.shard_bytes,
        "truncation": args.truncate,
        "resume": args.resume,
        "dtype": args.dtype,
        "workers": args.workers,
        "progress": progress,
    }
    if args.engine == "ray":
        from npbert.model import load_weights
        from npbert.ray import embed_corpus_on_ray

        # Read here too, from memory-mapped tensors, for the warning the local job gives: the
        # actors' own warnings reach Ray's logs, not this terminal.
        weights = load_weights(args.model, revision=args.revision, full=args.full)
        check_float32(weights, args.dtype)
        index = embed_corpus_on_ray(
            args.model, args.input, args.out, revision=args.revision, full=args.full,
            address=args.address, **options,
        )  # fmt: skip
    else:
        from npbert.embedder import Embedder
        from npbert.stream.corpus import embed_corpus

        embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
        check_float32(embedder.weights, args.dtype)
        index = embed_corpus(embedder, args.input, args.out, **options)
    counts = [(index["texts"], "text"), (index["tokens"], "token"), (len(index["shards"]), "shard")]
    texts, tokens, shards = (f"{n:,} {noun}{'' if n == 1 else 's'}" for n, noun in counts)
    say(f"embedded {texts}, {tokens}, in {shards}: {args.out}")
    return 0
