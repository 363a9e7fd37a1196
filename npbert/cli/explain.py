"""npbert explain: one text walked through the layer, stage by stage."""

import numpy as np

from npbert.cli.inputs import read_ids, refuse_id_companions, some_tokens
from npbert.cli.options import add_id_files, add_model, command
from npbert.cli.output import say
from npbert.errors import InputError


def add_explain(commands) -> None:
    explain = command(
        commands,
        "explain",
        "walk through the layer for one text",
        "Walk through the embedding layer for one text, stage by stage: the tokens and their "
        "ids,\neach lookup, the sum, the normalization, with what each one is; then check the "
        "result\nagainst npbert's fast path (exit 1 if they differ).",
        '  npbert explain "I am Sinan" --model M\n'
        '  npbert explain "Who is Sinan?" --pair "Sinan wrote a notebook." --model M\n'
        "  npbert explain --ids-file ids.npy --model M\n",
    )
    explain.add_argument("text", nargs="?", metavar="TEXT", help="the text to walk through")
    add_model(explain)
    explain.add_argument("--pair", metavar="TEXT", help="sentence B")
    explain.add_argument(
        "--truncate", action="store_true", help="cut a text longer than the model allows"
    )
    add_id_files(explain, "one sequence's, (L,) or (1, L) integers (for a checkpoint whose "
                 "tokenizer npbert cannot run, RoFormer's, or ids from a port)")  # fmt: skip
    explain.set_defaults(run=run_explain, verdict=True)  # its exit 1 is a verdict


def run_explain(args) -> int:
    from npbert.analysis.explain import explain

    weights, tokens, inputs = explained_inputs(args)
    say(f"model: {weights.source.get('model')}")
    text, equal = explain(weights, tokens, *inputs)
    say(text)
    return 0 if equal else 1


def explained_inputs(args) -> tuple:
    """(weights, tokens or None, (input_ids, token_type_ids, attention_mask, position_ids))
    for explain: the text tokenized, or --ids-file and the files that go with it, (L,) each
    (None for a file not given: the family's default)."""
    from npbert.embedder import Embedder

    if args.ids_file is not None:
        given = read_ids(args, args.text is not None, one=True)
        inputs = (given.input_ids, given.token_type_ids, given.attention_mask, given.position_ids)
        return given.weights, None, one_sequence(*inputs)
    refuse_id_companions(args)
    if args.text is None:
        raise InputError("nothing to explain: give a TEXT or --ids-file")
    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    pairs = None if args.pair is None else [args.pair]
    encoding = some_tokens(embedder.encode([args.text], pairs, truncation=args.truncate))
    inputs = (encoding.input_ids, encoding.token_type_ids, encoding.attention_mask, None)
    return embedder.weights, encoding.tokens[0], tuple(a if a is None else a[0] for a in inputs)


def one_sequence(input_ids, *others) -> tuple:
    """--ids-file's ids, (L,) or (1, L), and the others of its shape (checked by read_ids) as
    one sequence's, (L,): a file of one row is taken as its row; (L,) positions are every
    row's."""
    if np.ndim(input_ids) == 1:
        return input_ids, *others
    rows = (a if a is None or np.ndim(a) == 1 else np.asarray(a)[0] for a in others)
    return np.asarray(input_ids)[0], *rows
