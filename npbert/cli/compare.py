"""npbert compare: another implementation's output against npbert's float64 reference."""

import numpy as np

from npbert.cli.inputs import read_inputs
from npbert.cli.options import WITH_IDS, add_inputs, command, path, tolerance
from npbert.cli.output import say, to_json
from npbert.verify.tolerances import DEFAULT_RTOL, STEPS


def add_compare(commands) -> None:
    compare = command(
        commands,
        "compare",
        "check another implementation's output",
        "Check another implementation's output against npbert's float64 reference, stage by "
        "stage,\nfor the same inputs. Exit 0 within tolerance, 1 outside, 2 for bad input.",
        "  npbert compare mine.npy --model M --ids-file ids.npy\n"
        '  npbert compare stages.npz --model M "I am Sinan" --json\n'
        "  npbert compare mine.npy --model M -- -able\n",
    )
    compare.add_argument(
        "candidate",
        type=path,
        metavar="CANDIDATE",
        help="the output to check: .npy (the embeddings, or projected, told by its shape), .npz "
        "or .safetensors (embeddings or "
        "projected, and any stages: word, token_type, position, sum, embed_proj, normalized; "
        "input_ids, token_type_ids, position_ids, attention_mask, checked first), or .json",
    )
    add_inputs(compare)
    compare.add_argument(
        "--atol",
        type=tolerance,
        help="largest absolute difference allowed (default: 1e-5, or where a stage's values are "
        f"large, {STEPS} float32 steps of its largest: float32 cannot resolve 1e-5 past 128)",
    )
    compare.add_argument(
        "--rtol",
        type=tolerance,
        default=DEFAULT_RTOL,
        help="allowed difference relative to the reference (default: %(default)g)",
    )
    compare.add_argument(
        "--json",
        action="store_true",
        help='print the report as JSON (NaN and infinities as the strings "NaN", "Infinity")',
    )
    compare.set_defaults(run=run_compare, verdict=True)  # its exit 1 is a verdict


def run_compare(args) -> int:
    from npbert.model import embed_stages
    from npbert.verify import compare
    from npbert.verify.candidates import load_candidate
    from npbert.verify.report import format_report

    candidate = load_candidate(args.candidate)
    inputs = read_inputs(args)
    positional, keywords = inputs.embed_args()
    references = [
        embed_stages(*positional, **keywords, dtype=dtype, project=True)
        for dtype in (np.float64, np.float32)
    ]
    report = compare(
        candidate,
        *references,
        atol=args.atol,
        rtol=args.rtol,
        inputs=inputs.reference_inputs(),
        attention_mask=inputs.attention_mask,
        weights=inputs.weights,
    )
    note_defaulted_inputs(args, report, candidate, inputs.weights)
    say(to_json(report) if args.json else format_report(report))
    return 0 if report["ok"] else 1


# With --ids-file, what the reference takes for each input whose file was left out. Token
# types and the mask are defaults a caller may well have changed; positions are the ones the
# family's model makes itself, so a candidate's that differ are likely its own mistake.
DEFAULTED = {
    "token_type_ids": "the reference's are the default, all 0: no --token-type-ids-file given",
    "position_ids": "the reference's are the family's own, as its model makes them (no "
    "--position-ids-file given: give one only where the model is called with other positions)",
    "attention_mask": "the reference's are the default, all 1: no --attention-mask-file given",
}


def note_defaulted_inputs(args, report: dict, candidate: dict, weights) -> None:
    """A candidate's input that differs from what the reference took where no file was given
    says so: the candidate may hold the right ones and the option have been forgotten, or (for
    positions) be wrong. So does a token_type stage that disagrees by being other rows of the
    table, for a candidate that gave no token_type_ids (a pair's, say)."""
    from npbert.verify.notes import other_token_types

    for name, note in DEFAULTED.items():
        option, result = WITH_IDS[name], report["inputs"].get(name)
        defaulted = args.ids_file is not None and getattr(args, option) is None
        if defaulted and result and not result["ok"]:
            result["note"] = note
    stage = report["stages"].get("token_type")
    defaulted = args.ids_file is not None and args.token_type_ids_file is None
    if not (defaulted and stage and not stage["ok"]) or "token_type_ids" in report["inputs"]:
        return
    if other_token_types(candidate["token_type"], weights.token_type_embeddings):
        stage.setdefault("notes", []).append(DEFAULTED["token_type_ids"])
