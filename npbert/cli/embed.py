"""npbert embed: texts or ids through the layer; with --input, a corpus (npbert.cli.corpus)."""

import warnings

import numpy as np

from npbert.cli.corpus import add_embed_corpus
from npbert.cli.inputs import read_inputs
from npbert.cli.options import add_inputs, command, path
from npbert.cli.output import metadata, save, say, summary
from npbert.errors import InputError


def add_embed(commands, corpus: bool = False) -> None:
    """`embed`: its corpus form (npbert.cli.corpus) where `corpus`, else texts or ids."""
    if corpus:
        add_embed_corpus(commands)
        return
    embed = command(
        commands,
        "embed",
        "embed texts or token ids",
        "Embed texts (tokenized with the checkpoint's tokenizer) or token ids with the "
        "checkpoint's\nembedding layer. Without --out, print a readable summary. With --input, "
        "stream a whole\ncorpus into a directory of shards: `npbert embed --input FILE --help` "
        "lists that form's options.",
        '  npbert embed "I am Sinan" "this is a test sentence" --model M\n'
        '  npbert embed "Who is Sinan?" --pair "Sinan wrote a notebook." --model M\n'
        "  npbert embed --ids-file ids.npy --model M --out out.npz\n"
        "  npbert embed --input corpus.txt --out corpus.emb --model M\n"
        "  npbert embed --model M -- -able            # a text that starts with -\n",
    )
    add_text_arguments(embed)
    embed.set_defaults(run=run_embed, form="texts")


def add_text_arguments(embed) -> None:
    """The texts-or-ids form's arguments."""
    add_inputs(embed)
    embed.add_argument(
        "--out",
        type=path,
        metavar="FILE",
        help=".npz (embeddings, input_ids, token_type_ids, attention_mask, metadata; with "
        "--project, projected) or .npy (embeddings, or projected) (default: print a summary)",
    )
    embed.add_argument(
        "--stages", action="store_true", help="also write every stage of the layer (.npz)"
    )
    embed.add_argument(
        "--project",
        action="store_true",
        help="also apply the projection to the hidden size that ALBERT, ELECTRA, RoFormer, "
        "ConvBERT and RemBERT apply after the layer: what the first encoder layer receives "
        "(other families have none: it changes nothing)",
    )


def run_embed(args) -> int:
    from npbert.layer.fast import apply_projection
    from npbert.model import embed, embed_stages

    if args.stages and (args.out is None or args.out.suffix.lower() != ".npz"):
        raise InputError("--stages writes every stage to an .npz: give --out FILE.npz")
    inputs = read_inputs(args)
    positional, keywords = inputs.embed_args()
    if args.stages:
        outputs = embed_stages(*positional, **keywords, project=args.project)  # "projected" last
    else:
        outputs = {"embeddings": embed(*positional, **keywords)}
        if args.project and inputs.weights.config.projection == "after":
            outputs["projected"] = apply_projection(inputs.weights, outputs["embeddings"])
    # What the first encoder layer receives: under its own name, as compare reads it back.
    output = "projected" if "projected" in outputs else "embeddings"
    if not np.isfinite(outputs[output]).all():  # NaN spreads without a warning from NumPy
        warnings.warn("NaN or Inf in the output", RuntimeWarning, stacklevel=1)  # show_warning
    if args.out is not None:
        saved = dict(inputs.arrays)
        if not inputs.weights.config.type_vocab_size:  # no table: the layer takes no token
            saved.pop("token_type_ids", None)  # types, compare refuses them (vectors alike)
        arrays = {**outputs, **saved}
        written = save(args.out, output, arrays, metadata(inputs.weights, **inputs.meta))
        others = [name for name in outputs if name != output]
        if others and args.out.suffix.lower() == ".npz":
            say(f"  and the stages {', '.join(others)}")
        return written
    ids = np.atleast_2d(inputs.input_ids)
    say(summary(inputs.weights, output, outputs[output], inputs.tokens, inputs.texts, ids))
    return 0
