"""npbert explain: texts walked through the layer, stage by stage, what they share, and the
BERT paper's figure of the input representation with the checkpoint's values."""

import numpy as np

from npbert.cli.inputs import read_ids, refuse_id_companions, some_tokens
from npbert.cli.options import add_id_files, add_model, command, path
from npbert.cli.output import model_title, say
from npbert.errors import InputError


def add_explain(commands) -> None:
    explain = command(
        commands,
        "explain",
        "walk through the layer for texts",
        "Walk through the embedding layer for each text, stage by stage: the tokens and their "
        "ids,\neach lookup, the sum, the normalization, with what each one is; say what the "
        "texts share;\nthen check the result against npbert's fast path (exit 1 if they "
        "differ).",
        '  npbert explain "I am Sinan" --model M\n'
        '  npbert explain "I am Sinan" "She is Zoe" --model M\n'
        '  npbert explain "Who is Sinan?" --pair "Sinan wrote a notebook." --model M '
        "--plot pair.png\n"
        "  npbert explain --ids-file ids.npy --model M\n",
    )
    explain.add_argument("texts", nargs="*", metavar="TEXT", help="the texts to walk through")
    add_model(explain)
    explain.add_argument(
        "--pair", action="append", metavar="TEXT", help="sentence B: once for each TEXT, in order"
    )
    explain.add_argument(
        "--truncate", action="store_true", help="cut a text longer than the model allows"
    )
    explain.add_argument(
        "--plot",
        type=path,
        metavar="FILE",
        help="draw the BERT paper's figure of the input representation for one text (or pair) "
        "with the checkpoint's values: .png, .svg or .pdf (needs npbert[plot])",
    )
    add_id_files(explain, "one sequence's, (L,) or (1, L) integers (for a checkpoint whose "
                 "tokenizer npbert cannot run, RoFormer's, or ids from a port)")  # fmt: skip
    explain.set_defaults(run=run_explain, verdict=True)  # its exit 1 is a verdict


def run_explain(args) -> int:
    from npbert.analysis.explain import explain_texts

    if args.plot is not None:
        from npbert.analysis.figures import check_plot_path

        check_plot_path(args.plot)  # before the model loads
    weights, texts = explained_inputs(args)
    if args.plot is not None and len(texts) > 1:
        raise InputError(f"--plot draws one text (or a pair), not {len(texts)}: give one TEXT")
    say(f"model: {weights.source.get('model')}")
    text, equal = explain_texts(weights, texts)
    say(text)
    if args.plot is not None:
        from npbert.analysis.explain_plot import plot_explain

        plot_explain(weights, *texts[0], path=args.plot, title=model_title(args.model))
        say(f"figure: {args.plot}")
    return 0 if equal else 1


def explained_inputs(args) -> tuple:
    """(weights, [(tokens or None, input_ids, token_type_ids, attention_mask, position_ids)])
    for explain: each text tokenized alone, or --ids-file and the files that go with it, (L,)
    each (None for a file not given: the family's default)."""
    from npbert.embedder import Embedder

    if args.ids_file is not None:
        given = read_ids(args, bool(args.texts), one=True)
        inputs = (given.input_ids, given.token_type_ids, given.attention_mask, given.position_ids)
        return given.weights, [(None, *one_sequence(*inputs))]
    refuse_id_companions(args)
    if not args.texts:
        raise InputError("nothing to explain: give a TEXT or --ids-file")
    pairs = args.pair or []
    if pairs and len(pairs) != len(args.texts):
        raise InputError(
            f"--pair is sentence B of each TEXT, in order: {len(args.texts)} TEXT and "
            f"{len(pairs)} --pair; give one --pair for each TEXT, or none"
        )
    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    texts = []
    for number, text in enumerate(args.texts):
        pair = [pairs[number]] if pairs else None
        encoding = some_tokens(embedder.encode([text], pair, truncation=args.truncate))
        inputs = (encoding.input_ids, encoding.token_type_ids, encoding.attention_mask, None)
        texts.append((encoding.tokens[0], *(a if a is None else a[0] for a in inputs)))
    return embedder.weights, texts


def one_sequence(input_ids, *others) -> tuple:
    """--ids-file's ids, (L,) or (1, L), and the others of its shape (checked by read_ids) as
    one sequence's, (L,): a file of one row is taken as its row; (L,) positions are every
    row's."""
    if np.ndim(input_ids) == 1:
        return input_ids, *others
    rows = (a if a is None or np.ndim(a) == 1 else np.asarray(a)[0] for a in others)
    return np.asarray(input_ids)[0], *rows
