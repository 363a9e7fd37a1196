"""npbert inspect: a checkpoint's embedding tensors and settings."""

from pathlib import Path

from npbert.cli.options import add_revision, command
from npbert.cli.output import describe, say
from npbert.errors import InputError


def add_inspect(commands) -> None:
    inspect = command(
        commands,
        "inspect",
        "the embedding tensors of a checkpoint",
        "Show a checkpoint's embedding tensors (name, shape, dtype, bytes, file, whether every\n"
        "value is finite) and the settings npbert reads from its config.json.",
        "  npbert inspect path/to/checkpoint\n  npbert inspect --model bert-base-uncased\n",
    )
    inspect.add_argument(
        "model", nargs="?", metavar="MODEL", help="checkpoint directory or Hub repo id"
    )
    inspect.add_argument(
        "--model", dest="model_option", metavar="M", help="the same as MODEL, as other commands"
    )
    add_revision(inspect)
    inspect.set_defaults(run=run_inspect)


def run_inspect(args) -> int:
    from npbert.loading.checkpoint import locate_checkpoint, scan_values
    from npbert.model import resolve

    if (args.model is None) == (args.model_option is None):
        raise InputError("give the model once: npbert inspect MODEL, or --model MODEL")
    model = args.model if args.model is not None else args.model_option
    directory, source = resolve(model, revision=args.revision, full=args.full)
    config, tensors = locate_checkpoint(directory)
    width = max(len(t.name) for t in tensors.values())
    files = max(18, *(len(t.file.name) for t in tensors.values()))  # a shard's name is longer
    say(f"model: {source.get('model')}" + (f" @ {source['commit']}" if "commit" in source else ""))
    say(describe(config))
    say(f"{'tensor':<{width}}  {'shape':<14} {'dtype':<5} {'bytes':>12}  {'file':<{files}} values")
    for stored in tensors.values():
        say(
            f"{stored.name:<{width}}  {stored.shape!s:<14} {stored.dtype:<5} "
            f"{stored.nbytes:>12,}  {stored.file.name:<{files}} {scan_values(stored)}"
        )
    say(f"embedding tensors: {sum(t.nbytes for t in tensors.values()):,} bytes")
    eps = config.layer_norm_eps if config.norm == "layer_norm" else f"none ({config.norm})"
    say(f"layer_norm_eps: {eps}")
    for key in ("pad_token_id", "positions", "padding_idx", "max_length"):
        say(f"{key}: {getattr(config, key)}")
    for key in ("vocab_size", "embedding_size", "hidden_size"):
        say(f"{key}: {getattr(config, key)}")
    # The layer's tables' rows: config.json's own keys may say otherwise for a family without
    # the table (ModernBERT's max_position_embeddings sizes its rotary positions).
    rows = config.max_position_embeddings
    say(f"max_position_embeddings: {'none (no position table)' if rows is None else rows}")
    types = config.type_vocab_size
    say(f"type_vocab_size: {types or '0 (no token-type table)'}")
    if config.sinusoidal:
        say("sinusoidal_pos_embds: True (explain says whether the stored table holds them)")
    if config.projection:
        say(f"projection: {config.projection}")
    return 0


def check_tokenizer(directory: Path) -> None:
    """A fetched checkpoint's tokenizer files, read and held against its weights as the
    commands that embed texts read them: what fetch reports fetched, they take. A checkpoint
    without them, or of a family whose text is refused (RoFormer), is for ids alone: it passes."""
    from npbert.embedder import Embedder
    from npbert.loading.tokenize import tokenizer_file
    from npbert.model import load_weights

    family = load_weights(directory).config.family
    if tokenizer_file(directory, vocab_txt=family.vocab_txt) and not family.no_text:
        Embedder.from_pretrained(directory)
