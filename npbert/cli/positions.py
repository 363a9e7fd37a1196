"""npbert positions: the position table against the sinusoids."""

import sys

from npbert.cli.options import add_model, command, path
from npbert.cli.output import model_title, say, to_json
from npbert.errors import InputError


def add_positions_parser(commands) -> None:
    """`npbert positions`: the model's position table against the sinusoidal table."""
    from npbert.analysis.positions import DEFAULT_PRETRAINING_LENGTH

    positions = command(
        commands,
        "positions",
        "learned or sinusoidal? the position table against the sinusoids",
        "Measure how the model's learned position table relates to the sinusoidal table of the "
        "same shape, and to a random one: the least-squares fit by the sinusoids (R^2), each "
        "dimension's frequency, the cosine between positions and how it falls with distance, "
        "and the row norms by position, with a plain reading of the numbers.",
        "  npbert positions --model path/to/checkpoint\n"
        "  npbert positions --model bert-base-uncased --plot positions.png\n"
        "  npbert positions --model M --json > positions.json\n",
    )
    add_model(positions)
    positions.add_argument(
        "--plot",
        type=path,
        metavar="FILE",
        help="draw the figure: .png, .svg or .pdf (needs npbert[plot])",
    )
    positions.add_argument("--json", action="store_true", help="every figure as JSON")
    positions.add_argument(
        "--pretraining-length",
        type=int,
        metavar="N",
        help="the length most pre-training used, at most the table's rows; rows past it are "
        f"summarised apart (default {DEFAULT_PRETRAINING_LENGTH}, BERT's for 90%% of its "
        "steps, or every row of a shorter table)",
    )
    positions.set_defaults(run=run_positions)


def run_positions(args) -> int:
    """Print the analysis (or its JSON); with --plot, draw the figure first, then say so after
    the numbers."""
    import npbert
    from npbert.analysis.figures import check_plot_path
    from npbert.analysis.positions import analyse
    from npbert.analysis.positions_plot import plot_positions
    from npbert.analysis.positions_report import format_report

    if args.plot is not None:
        check_plot_path(args.plot)
    weights = npbert.load_weights(args.model, revision=args.revision, full=args.full)
    model, config = weights.source.get("model", str(args.model)), weights.config
    first, table = position_rows(weights, model)
    length = args.pretraining_length
    if length is not None and not 1 <= length <= len(table):
        raise InputError(
            f"--pretraining-length {length}: give 1 to the table's {len(table)} positions"
        )
    figures = analyse(table, pretraining_length=length)
    figures = {"model": model, "model_type": config.model_type, "first_row": first, **figures}
    if args.plot is not None:  # drawn first: a file it cannot write leaves no report behind
        plot_positions(table, figures, args.plot, title=model_title(model))
    header = f"model: {model}\n"
    if first:  # as figures["first_row"] says in JSON
        header += (
            f"rows {first}..{first + len(table) - 1} of its position table: "
            f"{config.model_type} numbers real tokens from "
            + ("padding_idx + 1" if config.padding_idx is not None else f"row {first}")
            + f" (position 0 below is row {first})\n"
        )
    say(to_json(figures) if args.json else header + format_report(figures))
    if args.plot is not None:
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def position_rows(weights, model: str) -> tuple:
    """(the first row a real token's position looks up, the table from it): RoBERTa's rows up
    to padding_idx are never a real token's, nor Nystromformer's first two. InputError without
    a learned position table."""
    config = weights.config
    if weights.position_embeddings is None:
        raise InputError(
            f"{model}: {config.model_type} has no learned position table (its positions are "
            "computed in attention, e.g. rotary): there is nothing to compare"
        )
    first = config.first_position
    return first, weights.position_embeddings[first:]
