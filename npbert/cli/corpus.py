"""`npbert embed --input FILE|DIR --out DIR`: the corpus form of embed, a corpus streamed into
a directory of shards, with a parser of its own: main picks it when --input is given."""

import argparse
import dataclasses
import sys

from npbert.cli.inputs import check_float32
from npbert.cli.options import add_model, command, count, path
from npbert.cli.output import say
from npbert.stream.settings import DTYPES, ENGINES, INPUT_FORMATS, CorpusSettings


def is_corpus(argv: list[str]) -> bool:
    """Whether `argv` is `embed` with --input among its options (before any --)."""
    if not argv or argv[0] != "embed":
        return False
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    return any(o == "--input" or str(o).startswith("--input=") for o in options)


def add_embed_corpus(commands) -> None:
    """`embed` as the corpus form: --input, --out DIR, the model, and CorpusSettings' options."""
    embed = command(
        commands,
        "embed",
        "embed texts or token ids",
        "Stream a corpus (one text a line, JSON lines or Parquet; a directory of them; or "
        "standard input) through the checkpoint's embedding layer into a directory of shards, "
        "in bounded memory, resumable, on this machine's cores or on a Ray cluster.",
        "  npbert embed --input corpus.txt --out corpus.emb --model M\n"
        "  npbert embed --input corpus/ --out corpus.emb --model M --dtype float16\n"
        "  cat corpus.jsonl | npbert embed --input - --input-format jsonl --out c.emb --model M\n"
        "  npbert embed --input corpus.txt --out corpus.emb --model M --resume\n",
    )
    embed.see = "npbert embed --input FILE --help"  # without --input: the texts' help
    add_corpus_arguments(embed)
    embed.set_defaults(run=run_embed_corpus, form="corpus")


def add_corpus_arguments(embed: argparse.ArgumentParser) -> None:
    """The corpus form's arguments, its settings' defaults those of CorpusSettings."""
    embed.add_argument(
        "--input",
        required=True,
        metavar="FILE|DIR",
        help=".txt (a text a line), .jsonl, .parquet, a directory of them, or - for stdin",
    )
    embed.add_argument(
        "--out", required=True, type=path, metavar="DIR", help="the directory of shards"
    )
    add_model(embed)
    add_settings(embed.add_argument_group("corpus", "how the corpus is embedded"))
    embed.add_argument("--quiet", action="store_true", help="no progress on stderr")
    embed.set_defaults(**dataclasses.asdict(CorpusSettings()))


def add_settings(group) -> None:
    """An option for each field of CorpusSettings but progress (--quiet), by its name."""
    group.add_argument(
        "--input-format", choices=INPUT_FORMATS, help="default: from each file's name, txt for -"
    )
    group.add_argument(
        "--shard-bytes",
        type=count,
        metavar="N",
        help="bytes of input per shard (default: %(default)s, about 16k tokens of English "
        "text); memory use grows with it",
    )
    group.add_argument(
        "--truncate",
        dest="truncation",
        action="store_true",
        help="cut texts longer than the model allows (default: refuse them)",
    )
    group.add_argument(
        "--dtype",
        choices=DTYPES,
        help="of the embeddings written (default: %(default)s); float16 is half the size",
    )
    group.add_argument("--resume", action="store_true", help="continue an interrupted run")
    group.add_argument(
        "--workers",
        type=count,
        metavar="N",
        help="processes (local; at most 4 per core) or actors (ray); default: one per core "
        "(per CPU of the cluster)",
    )
    group.add_argument(
        "--engine",
        choices=ENGINES,
        help="local worker processes or a Ray cluster (needs npbert[ray]) (default: %(default)s)",
    )
    group.add_argument(
        "--address",
        help="--engine ray: the cluster to join (default: RAY_ADDRESS's, else start one here)",
    )


def run_embed_corpus(args) -> int:
    """The corpus job, on the engine the settings name; says what it embedded."""
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(CorpusSettings)}
    options["progress"] = None if args.quiet else "bar" if sys.stderr.isatty() else "lines"
    settings = CorpusSettings(**options)
    if settings.engine == "ray":
        index = on_ray(args, settings)
    else:
        from npbert.embedder import Embedder
        from npbert.stream.corpus import embed_corpus

        embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
        check_float32(embedder.weights, settings.dtype)
        index = embed_corpus(embedder, args.input, args.out, settings)
    counts = [(index["texts"], "text"), (index["tokens"], "token"), (len(index["shards"]), "shard")]
    texts, tokens, shards = (f"{n:,} {noun}{'' if n == 1 else 's'}" for n, noun in counts)
    say(f"embedded {texts}, {tokens}, in {shards}: {args.out}")
    return 0


def on_ray(args, settings: CorpusSettings) -> dict:
    """The corpus job on Ray; its index."""
    from npbert.model import load_weights
    from npbert.ray import embed_corpus_on_ray

    # Read here too, from memory-mapped tensors, for the warning the local job gives: the
    # actors' own warnings reach Ray's logs, not this terminal.
    check_float32(load_weights(args.model, revision=args.revision, full=args.full), settings.dtype)
    return embed_corpus_on_ray(
        args.model, args.input, args.out, revision=args.revision, full=args.full,
        settings=settings,
    )  # fmt: skip
