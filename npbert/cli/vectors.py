"""npbert vectors: conformance vectors for other implementations."""

import sys

from npbert.cli.errors import warn_ahead
from npbert.cli.options import add_model, command, path
from npbert.cli.output import say
from npbert.loading.checkpoint import NOT_FINITE, float32_trouble


def add_vectors(commands) -> None:
    vectors = command(
        commands,
        "vectors",
        "write conformance vectors",
        "Write conformance vectors for other implementations: for a set of cases, the inputs "
        "and\nevery stage in float32 and float64 as .npy, with manifest.json and FORMAT.md.",
        "  npbert vectors --model M --out vectors/\n",
    )
    add_model(vectors)
    vectors.add_argument(
        "--out", type=path, required=True, metavar="DIR", help="a new directory for the vectors"
    )
    vectors.set_defaults(run=run_vectors)


def run_vectors(args) -> int:
    from npbert.verify.vectors import load_model, weights_of, write_vectors

    model, reason = load_model(args.model, revision=args.revision, full=args.full)
    weights = weights_of(model)
    if reason:
        print(
            f"npbert: warning: {reason}; the vectors are cases of random ids alone, none of text",
            file=sys.stderr,
        )
    # Its float32 files are what float32 gives: from weights it cannot compute, wrong values
    # that need not be NaN, said ahead as for a corpus. (NaN or Inf in the weights:
    # write_vectors refuses them.)
    trouble = float32_trouble(weights)
    if trouble and not trouble.endswith(NOT_FINITE):
        warn_ahead(trouble)
    manifest = write_vectors(model, args.out)
    say(f"wrote {len(manifest['cases'])} cases to {args.out} (manifest.json, FORMAT.md)")
    return 0
