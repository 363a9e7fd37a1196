"""The `npbert` command: embed, explain, inspect, fetch.

Bad input exits 2 with one line naming what is wrong; a traceback is a bug.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from npbert.errors import InputError


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="npbert", description="BERT's embedding layer in NumPy.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    embed = commands.add_parser("embed", help="embed texts or ids")
    embed.add_argument("texts", nargs="*", metavar="TEXT")
    add_model(embed)
    embed.add_argument(
        "--pair", action="append", metavar="TEXT", help="sentence B, once per TEXT (repeatable)"
    )
    embed.add_argument("--ids-file", type=Path, metavar="IDS.npy", help="(L,) or (B, L) int ids")
    embed.add_argument("--token-type-ids-file", type=Path, metavar="TT.npy")
    embed.add_argument("--truncate", action="store_true", help="cut texts to max positions")
    embed.add_argument(
        "--out", type=Path, metavar="FILE", help=".npz (embeddings and inputs) or .npy"
    )
    embed.set_defaults(run=run_embed)

    explain = commands.add_parser("explain", help="walk through the layer for one text")
    explain.add_argument("text", metavar="TEXT")
    add_model(explain)
    explain.add_argument("--pair", metavar="TEXT", help="sentence B")
    explain.add_argument("--truncate", action="store_true")
    explain.set_defaults(run=run_explain)

    inspect = commands.add_parser("inspect", help="the five embedding tensors of a checkpoint")
    inspect.add_argument("model", metavar="MODEL", help="checkpoint directory or Hub repo id")
    add_revision(inspect)
    inspect.set_defaults(run=run_inspect)

    fetch = commands.add_parser("fetch", help="fetch a Hub model's embedding tensors")
    fetch.add_argument("model", metavar="MODEL", help="Hub repo id")
    add_revision(fetch)
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


def run_embed(args) -> int:
    if args.ids_file is not None:
        if args.texts or args.pair:
            raise InputError("give TEXT arguments or --ids-file, not both")
        return embed_ids(args)
    if args.token_type_ids_file is not None:
        raise InputError("--token-type-ids-file goes with --ids-file")
    if not args.texts:
        raise InputError("nothing to embed: give TEXT arguments or --ids-file")
    return embed_texts(args)


def embed_texts(args) -> int:
    from npbert.model import Embedder

    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    if args.pair and len(args.pair) != len(args.texts):
        raise InputError(f"{len(args.texts)} TEXT arguments but {len(args.pair)} --pair")
    result = embedder(args.texts, args.pair, truncation=args.truncate)
    arrays = {
        "embeddings": result.embeddings,
        "input_ids": result.input_ids,
        "token_type_ids": result.token_type_ids,
        "attention_mask": result.attention_mask,
    }
    if args.out is not None:
        return save(args.out, arrays, metadata(embedder.weights, texts=args.texts, pairs=args.pair))
    print(
        summary(
            embedder.weights,
            result.embeddings,
            result.tokens,
            args.texts,
            np.atleast_2d(result.input_ids),
        )
    )
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


def embed_ids(args) -> int:
    from npbert.model import embed, load_weights

    input_ids = load_ids(args.ids_file, "--ids-file")
    token_type_ids = None
    if args.token_type_ids_file is not None:
        token_type_ids = load_ids(args.token_type_ids_file, "--token-type-ids-file")
    weights = load_weights(args.model, revision=args.revision, full=args.full)
    embeddings = embed(weights, input_ids, token_type_ids)
    if args.out is not None:
        arrays = {"embeddings": embeddings, "input_ids": input_ids}
        if token_type_ids is not None:
            arrays["token_type_ids"] = token_type_ids
        return save(args.out, arrays, metadata(weights, ids_file=str(args.ids_file)))
    print(summary(weights, embeddings, None, None))
    return 0


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
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if path.suffix == ".npz":
                np.savez(f, **arrays, metadata=np.array(json.dumps(meta)))
            else:
                np.save(f, arrays["embeddings"])
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
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
    fetched = hub.fetch(args.model, revision=args.revision, full=args.full)
    source = fetched.source
    print(f"{source['model']} at {source['commit']} ({source['revision']})")
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
