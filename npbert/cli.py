"""The `npbert` command: embed, explain, compare, vectors, inspect, fetch, positions.

Bad input exits 2 with one line naming what is wrong, a corpus worker lost exits 1 with one
line; a traceback is a bug.
"""

import argparse
import json
import logging
import math
import os
import shlex
import signal
import sys
import textwrap
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert import __version__
from npbert.errors import InputError, WorkerLost
from npbert.loading.checkpoint import NOT_FINITE, float32_trouble, largest_output
from npbert.loading.npyfile import load_npy
from npbert.verify.tolerances import DEFAULT_RTOL, STEPS, check_tolerance


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # TEXT arguments may come after the options (`compare C --model M TEXT`); argparse leaves
    # those over, and they are texts as long as none looks like an option, or they follow --.
    args, extra = parser.parse_known_args(argv)
    if extra:
        dashes = extra.index("--") if "--" in extra else len(extra)
        if any(e.split("=")[0] == "--token" for e in extra[:dashes]):  # not fetch: its value
            args.parser.error(TOKEN_ELSEWHERE)  # is a secret, not to be echoed to a log
        if not hasattr(args, "texts") or any(e.startswith("-") for e in extra[:dashes]):
            # said by the command's parser, whose --help lists what it takes
            words = hasattr(args, "text") and not any(e.startswith("-") for e in extra)
            hint = prefix_hint(args, extra) or dashed_hint(args, extra)
            hint = "; quote a TEXT of several words" if words else hint
            args.parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        args.texts = [*args.texts, *extra[:dashes], *extra[dashes + 1 :]]
    if sys.stdout is None:  # started with it closed (>&-): what the command says would be lost
        print("npbert: error: standard output is closed", file=sys.stderr)
        return 2
    # Ctrl-C and SIGTERM as Python's defaults have them (Ctrl-C not ignored, as for a job
    # started with `&` by sh), and only where signals can be set: the main thread.
    main_thread = threading.current_thread() is threading.main_thread()
    ours = [(n, d, h) for n, d, h in STOPPING if main_thread and signal.getsignal(n) is d]
    for number, _, handler in ours:
        signal.signal(number, handler)
    try:
        return run(args)
    finally:
        for number, default, handler in ours:
            if signal.getsignal(number) is handler:  # not stopped by a signal
                signal.signal(number, default)


class Said(logging.Handler):
    """What npbert's modules log (a warning, such as hub's Range fallback), shown as the CLI's
    other warnings are: one line on standard error, whichever stream that is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"npbert: warning: {record.getMessage()}", file=sys.stderr)


def say_logged() -> None:
    """Show npbert's logged warnings through Said (once, however often main runs), not also
    through whatever handlers the root logger has."""
    logger = logging.getLogger("npbert")
    if not any(isinstance(handler, Said) for handler in logger.handlers):
        logger.addHandler(Said(logging.WARNING))
        logger.propagate = False


def run(args) -> int:
    """The command, its errors turned into one line and an exit status."""
    say_logged()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            code = args.run(args)
        say_warnings(caught)  # after a command that ended well: an error says enough
        flush_stdout()
        return code
    except BrokenPipeError:
        return reader_gone()
    except InputError as error:
        print(f"npbert: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # an unreadable input or unwritable output file
        print(f"npbert: error: {os_error(args, error)}", file=sys.stderr)
        return 2
    except WorkerLost as error:
        print(f"npbert: error: {error}", file=sys.stderr)
        return 1
    except MemoryError as error:  # NumPy's names the array it could not allocate
        reason = str(error) or "no more could be allocated"
        print(f"npbert: error: out of memory ({reason})", file=sys.stderr)
        return 2 if args.run in (run_compare, run_explain) else 1  # their 1 is a verdict
    except Terminated:
        print("npbert: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("npbert: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


# The option of each input file (--ids-file and those that go with it), by the array it holds,
# as npbert.layer.inputs names it in its errors.
ID_FILES = {
    "input_ids": "ids_file",
    "token_type_ids": "token_type_ids_file",
    "position_ids": "position_ids_file",
    "attention_mask": "attention_mask_file",
}
WITH_IDS = {name: option for name, option in ID_FILES.items() if name != "input_ids"}
# The options that name a file or directory npbert reads or writes.
PATH_OPTIONS = ("out", "input", *ID_FILES.values(), "plot")


def flag(option: str) -> str:
    """The command-line flag of an argparse dest: token_type_ids_file -> --token-type-ids-file."""
    return "--" + option.replace("_", "-")


def os_error(args, error: OSError) -> str:
    """The OS's reason, with the option that named the file where one did ("--out F: ...")."""
    reason = error.strerror or str(error)
    if not error.filename:  # standard output
        return reason
    path = Path(os.fsdecode(error.filename))
    for name in PATH_OPTIONS:
        given = getattr(args, name, None)
        if not isinstance(given, str | os.PathLike):
            continue
        option = flag(name)
        if path == Path(given):
            return f"{option} {path}: {reason}"
        if Path(given) in path.parents:  # a file in the directory the option names
            return f"{option} {given}: {reason} ({path})"
    return f"{reason}: {path}"


def say(*parts) -> None:
    """print() to standard output, where a command's results go."""
    with on_stdout():
        print(*parts)


def flush_stdout() -> None:
    """Flush what the command said: a reader that went away shows here, not at exit."""
    with on_stdout():
        sys.stdout.flush()


@contextmanager
def on_stdout():
    """Writing standard output: its OSError (a full disk behind `>`) names no file, and would
    read as the --out file's; said as standard output's. BrokenPipeError as it is: the reader
    went away (reader_gone)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        reason = error.strerror or str(error)
        raise OSError(error.errno, f"cannot write to standard output ({reason})") from None


# Where the layer is computed (npbert.layer), and cli.py, whose own "NaN or Inf in the output"
# warning joins them: NumPy's warnings from these lines are about the weights, and so are those
# NumPy gives from its own files (a mean's sum overflowing: explain, vectors).
LAYER_FILES = os.path.join(os.path.dirname(__file__), "layer") + os.sep
NUMPY_FILES = os.path.dirname(np.__file__) + os.sep


def say_warnings(caught: list) -> None:
    """NumPy's RuntimeWarnings from the layer (NaN or Inf met, float32 overflowed), which
    name a line of npbert, as one line that says what they mean for the output; other
    warnings as they are."""
    numpy_said = [
        w
        for w in caught
        if issubclass(w.category, RuntimeWarning)
        and (w.filename == __file__ or w.filename.startswith((LAYER_FILES, NUMPY_FILES)))
    ]
    for other in (w for w in caught if w not in numpy_said):
        warnings.showwarning(other.message, other.category, other.filename, other.lineno)
    if numpy_said:
        warn_float32(
            "NaN, Inf or a float32 overflow in the layer: the checkpoint's tensors hold NaN or "
            "Inf, or values too large for float32"
        )


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, a batch scheduler ending the job): the command stops and
    cleans up as it does on Ctrl-C, where Python's default would end it at once and leave a
    corpus run's lock and pending files behind."""


def interrupted(signum, frame) -> None:
    """Ctrl-C: stop, and let nothing interrupt the cleanup that follows (workers killed,
    pending files removed): a second Ctrl-C in the middle of it left workers running, and the
    process waiting for them. The command exits once it is done."""
    ignore_stopping()
    raise KeyboardInterrupt


def terminated(signum, frame) -> None:
    """SIGTERM: as interrupted, said as Terminated."""
    ignore_stopping()
    raise Terminated


def ignore_stopping() -> None:
    for number, _, handler in STOPPING:
        if signal.getsignal(number) is handler:
            signal.signal(number, signal.SIG_IGN)


# (signal, Python's default handler, the CLI's), for main to install and restore
STOPPING = [
    (signal.SIGINT, signal.default_int_handler, interrupted),
    (signal.SIGTERM, signal.SIG_DFL, terminated),
]


def reader_gone() -> int:
    """End as ls, cat and git do when the reader of their output goes away (`npbert ... |
    head -1`): killed by SIGPIPE, which the shell reports as status 141, with nothing on
    stderr. Scripts with `set -o pipefail` already know 141 from those tools; 0 would claim
    the output was all read. Python ignores SIGPIPE and raises BrokenPipeError instead, so
    the default action is restored and the signal raised; stdout goes to /dev/null first,
    so that nothing tries to flush the rest."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.raise_signal(signal.SIGPIPE)
    return 128 + signal.SIGPIPE  # what the shell reports; not reached, the signal ends us


def dashed_hint(args, extra: list[str]) -> str:
    """For a command that takes texts, where one left over starts with a single -: argparse
    read it as an option it does not have. An option's name with one - is a typo."""
    takes = hasattr(args, "texts") or hasattr(args, "text")
    dashed = [e for e in extra if e.startswith("-") and not e.startswith("--")]
    if not (takes and dashed):
        return ""
    options = args.parser._option_string_actions  # argparse's own table of option strings
    typo = next((f"-{e}" for e in dashed if f"-{e.split('=')[0]}" in options), None)
    if typo:
        return f"; did you mean {typo}?"
    return f"; a TEXT that starts with - goes after -- (`-- {shlex.quote(dashed[0])}`)"


def prefix_hint(args, extra: list[str]) -> str:
    """For an option given by the start of its name, which argparse does not take (Parser):
    the options it may stand for."""
    options = args.parser._option_string_actions  # argparse's own table of option strings
    for given in extra:
        name = given.split("=")[0]
        matches = sorted(o for o in options if name.startswith("--") and o.startswith(name))
        if matches:
            return f"; did you mean {' or '.join(matches)}? (give an option's whole name)"
    return ""


TOKEN_ELSEWHERE = (
    "--token is an option of npbert fetch alone (the value given is not shown): fetch the "
    "model with it first, and this command reads the cache; or set HF_TOKEN"
)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line, like every other npbert error, an option of one
    value refused when given twice, and no option taken from a prefix of its name: `--token`
    was read as --token-type-ids-file, its value, a secret, printed as a missing file."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})
        self.register("action", None, Once)
        self.register("action", "store", Once)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class Once(argparse.Action):
    """argparse's "store", the default action, for an option given once: argparse keeps the
    last, and `--input a.txt --input b.txt` would embed b.txt alone without a word."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, self.default)
        if option_string and before is not self.default:
            parser.error(f"{option_string} given twice ({before}, then {values}): give it once")
        setattr(namespace, self.dest, values)


def count(text: str) -> int:
    """A whole number of at least 1, for --shard-bytes and --workers."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def path(text: str) -> Path:
    """A file or directory argument; an empty one is refused, where Path("") would be the
    current directory (--out "" wrote a corpus's shards there)."""
    if not text:
        raise argparse.ArgumentTypeError("is empty: give a path")
    return Path(text)


def tolerance(text: str) -> float:
    """--atol and --rtol, checked as compare() checks them."""
    try:
        value = float(text)
    except ValueError:
        value = text  # refused below, as given
    try:
        return check_tolerance("the tolerance", value)
    except InputError:  # as typed: 1e400 is "inf" to float()
        raise argparse.ArgumentTypeError(
            f"the tolerance must be a finite number of at least 0, got {text!r}"
        ) from None


def command(commands, name: str, summary: str, description: str, examples: str):
    """A subcommand with its help: a description (one paragraph) and examples (as written);
    args.parser is it, for main's errors about its arguments."""
    subcommand = commands.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, 79),
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subcommand.set_defaults(parser=subcommand)
    return subcommand


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="npbert",
        description="The embedding layer of BERT and its family of encoders, in NumPy: the "
        "input embeddings the first encoder layer receives (not contextual or sentence "
        "embeddings).",
        epilog="Run 'npbert COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    add_embed(commands)
    add_explain(commands)
    add_compare(commands)
    add_vectors(commands)
    add_inspect(commands)
    add_fetch(commands)
    add_positions_parser(commands)
    return parser


def add_embed(commands) -> None:
    embed = command(
        commands,
        "embed",
        "embed texts or token ids",
        "Embed texts (tokenized with the checkpoint's tokenizer) or token ids with the "
        "checkpoint's\nembedding layer. Without --out, print a readable summary; with --input, "
        "stream a whole\ncorpus into a directory of shards.",
        '  npbert embed "I am Sinan" "this is a test sentence" --model M\n'
        '  npbert embed "Who is Sinan?" --pair "Sinan wrote a notebook." --model M\n'
        "  npbert embed --ids-file ids.npy --model M --out out.npz\n"
        "  npbert embed --input corpus.txt --out corpus.emb --model M\n"
        "  npbert embed --model M -- -able            # a text that starts with -\n",
    )
    add_inputs(embed)
    embed.add_argument(
        "--out",
        type=path,
        metavar="FILE",
        help=".npz (embeddings, input_ids, token_type_ids, attention_mask, metadata; with "
        "--project, projected) or .npy (embeddings, or projected); with --input, the directory "
        "of shards (default: print a summary)",
    )
    embed.add_argument(
        "--stages", action="store_true", help="also write every stage of the layer (.npz)"
    )
    embed.add_argument(
        "--project",
        action="store_true",
        help="also apply the projection to the hidden size that ALBERT, ELECTRA and RoFormer "
        "apply after the layer: what the first encoder layer receives (other families have "
        "none: it changes nothing)",
    )
    add_corpus_options(embed)
    embed.set_defaults(run=run_embed)


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
    explain.set_defaults(run=run_explain)


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
    compare.set_defaults(run=run_compare)


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


def add_fetch(commands) -> None:
    fetch = command(
        commands,
        "fetch",
        "fetch a Hub model's embedding tensors",
        "Fetch a Hub model's embedding tensors (with its config and tokenizer) into the cache, "
        "by\nHTTP range requests: only the embedding tensors' bytes, unless --full.",
        "  npbert fetch bert-base-uncased\n  npbert fetch bert-base-uncased --revision main\n",
    )
    fetch.add_argument("model", metavar="MODEL", help="Hub repo id")
    add_revision(fetch)
    fetch.add_argument("--token", help="Hub token (default: HF_TOKEN or `hf auth login`'s)")
    fetch.add_argument("--cache-dir", metavar="DIR", help="Hub cache (default: HF_HUB_CACHE)")
    fetch.add_argument(
        "--offline",
        action="store_true",
        help="no request: check the cached copy only (as HF_HUB_OFFLINE=1)",
    )
    fetch.add_argument(
        "--quiet", action="store_true", help="no progress bars; print only the cache path"
    )
    fetch.set_defaults(run=run_fetch)


def add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, metavar="M", help="checkpoint directory or Hub repo id"
    )
    add_revision(parser)


def add_revision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--revision", help="Hub branch, tag or commit sha (default: the repo's main branch)"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="download the whole weights file from the Hub, not only the embedding tensors",
    )


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """TEXT arguments (with --pair, --truncate) or --ids-file, and the model."""
    parser.add_argument(
        "texts",
        nargs="*",
        default=[],  # else argparse calls TEXT required where an argument is missing
        metavar="TEXT",
        help="texts to embed; put one starting with - after --",
    )
    add_model(parser)
    parser.add_argument(
        "--pair", action="append", metavar="TEXT", help="sentence B, once per TEXT (repeatable)"
    )
    parser.add_argument(
        "--truncate",
        action="store_true",
        help="cut texts longer than the model allows (default: refuse them)",
    )
    add_id_files(parser, "(L,) or (B, L) integers")


def add_id_files(parser: argparse.ArgumentParser, shapes: str) -> None:
    """--ids-file, of `shapes`, and the files that go with it."""
    parser.add_argument(
        "--ids-file", type=path, metavar="IDS.npy", help=f"token ids instead of TEXT: {shapes}"
    )
    parser.add_argument(
        "--token-type-ids-file",
        type=path,
        metavar="TT.npy",
        help="token type ids for --ids-file, of its shape (default: all 0)",
    )
    parser.add_argument(
        "--position-ids-file",
        type=path,
        metavar="POS.npy",
        help="position ids for --ids-file, of its shape or (L,) for every sequence (default: "
        "the family's, 0..L-1 or RoBERTa's from the padding)",
    )
    parser.add_argument(
        "--attention-mask-file",
        type=path,
        metavar="MASK.npy",
        help="attention mask for --ids-file, of its shape, 0 for padding (default: all 1); "
        "DeBERTa's layer zeroes padded rows",
    )


@dataclass
class ToEmbed:
    """What to embed: weights and (B, L) ids, from texts or from .npy files."""

    weights: object
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None  # None: the family's default, or it has no table
    arrays: dict  # input arrays to save beside the embeddings
    meta: dict  # what went in, for the output's metadata
    tokens: list | None = None
    texts: list | None = None
    attention_mask: np.ndarray | None = None
    position_ids: np.ndarray | None = None  # None: the family's default

    def embed_args(self) -> tuple:
        """The positional and keyword arguments of embed() and embed_stages()."""
        args = (self.weights, self.input_ids, self.token_type_ids)
        return args, {"position_ids": self.position_ids, "attention_mask": self.attention_mask}

    def reference_inputs(self) -> dict:
        """The inputs the layer takes, the family's defaults filled in, as compare() checks a
        candidate's: {name: array, or None where the layer takes none}."""
        from npbert.layer.inputs import prepare_inputs

        args = (self.input_ids, self.token_type_ids, self.position_ids, self.attention_mask)
        used = prepare_inputs(self.weights.config, *args)
        mask = used.attention_mask
        if mask is None:
            mask = np.ones_like(used.input_ids)  # every token real
        return {
            "input_ids": used.input_ids,
            "token_type_ids": used.token_type_ids,
            "position_ids": used.position_ids,
            # only DeBERTa's layer takes the mask (it zeroes padding): others' is not checked
            "attention_mask": mask if self.weights.config.family.masks_padding else None,
        }


def read_inputs(args) -> ToEmbed:
    from npbert.model import Embedder

    if args.ids_file is not None:
        return read_ids(args, bool(args.texts))
    refuse_id_companions(args)
    if not args.texts:
        raise InputError("nothing to embed: give TEXT arguments or --ids-file")
    if args.pair and len(args.pair) != len(args.texts):
        raise InputError(f"{len(args.texts)} TEXT arguments but {len(args.pair)} --pair")
    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    encoding = some_tokens(embedder.encode(args.texts, args.pair, truncation=args.truncate))
    arrays = {
        "input_ids": encoding.input_ids,
        "token_type_ids": encoding.token_type_ids,
        "attention_mask": encoding.attention_mask,
    }
    meta = {"texts": args.texts, "pairs": args.pair}
    return ToEmbed(
        embedder.weights,
        encoding.input_ids,
        encoding.token_type_ids if embedder.weights.config.type_vocab_size else None,
        arrays,
        meta,
        encoding.tokens,
        args.texts,
        encoding.attention_mask,
    )


def refuse_id_companions(args) -> None:
    """InputError for a file that goes with --ids-file (--token-type-ids-file, ...) given
    without it."""
    for option in WITH_IDS.values():
        if getattr(args, option) is not None:
            raise InputError(f"{flag(option)} goes with --ids-file")


def some_tokens(encoding):
    """The Encoding, if any of its texts has a token: a tokenizer that adds no special tokens
    gives an empty text none, and there would be nothing to embed or explain."""
    if encoding.input_ids.shape[-1] == 0:
        raise InputError(
            "no text gives a token: the tokenizer adds no special tokens, and the text is "
            "empty or whitespace: nothing to embed"
        )
    return encoding


def read_ids(args, text_given: bool, *, one: bool = False) -> ToEmbed:
    """--ids-file, with --token-type-ids-file, --position-ids-file and --attention-mask-file
    where given; `one`: the ids must be one sequence's (refused before the model loads)."""
    from npbert.model import load_weights

    if text_given or args.pair:
        raise InputError("give TEXT arguments or --ids-file, not both")
    if args.truncate:
        raise InputError("--truncate cuts texts; it does nothing to --ids-file's ids")
    input_ids = load_npy(args.ids_file, "--ids-file")
    if one:
        refuse_batches(args, np.shape(input_ids))
    token_type_ids, position_ids, attention_mask = (
        None if getattr(args, option) is None else load_npy(getattr(args, option), flag(option))
        for option in WITH_IDS.values()
    )
    shape = np.shape(input_ids)
    arrays = {  # the inputs used: the files', or the defaults a tokenizer gives unpadded ids
        "input_ids": input_ids,
        "token_type_ids": np.zeros(shape, np.int64) if token_type_ids is None else token_type_ids,
        "attention_mask": np.ones(shape, np.int64) if attention_mask is None else attention_mask,
        **({} if position_ids is None else {"position_ids": position_ids}),
    }
    weights = load_weights(args.model, revision=args.revision, full=args.full)
    check_id_files(args, weights.config, input_ids, token_type_ids, position_ids, attention_mask)
    if attention_mask is None:
        warn_unmasked_padding(weights.config, np.asarray(input_ids))
    if position_ids is not None:
        warn_other_positions(weights.config, np.asarray(input_ids), np.asarray(position_ids))
    meta = {"ids_file": str(args.ids_file)}
    return ToEmbed(
        weights, input_ids, token_type_ids, arrays, meta,
        attention_mask=attention_mask, position_ids=position_ids,
    )  # fmt: skip


def warn_other_positions(config, input_ids: np.ndarray, position_ids: np.ndarray) -> None:
    """One line on stderr where --position-ids-file's positions for real tokens are not those
    the family's model makes for these ids: they are used as given, so a port that numbers
    positions wrongly (RoBERTa's from 0, not padding_idx + 1) and passes its own to compare
    would pass. (RoBERTa's padding takes position padding_idx; what a file gives it there is
    left alone.)"""
    from npbert.layer.inputs import own_position_ids

    own = own_position_ids(config, input_ids)  # (L,) or input_ids' shape
    if own is None:
        return
    given, own = np.broadcast_arrays(position_ids, own)
    real = own != config.padding_idx  # every token but RoBERTa's padding
    differ = np.argwhere((given != own) & real)
    if not len(differ):
        return
    at = tuple(int(i) for i in differ[0])
    print(
        f"npbert: warning: --position-ids-file holds positions other than those "
        f"{config.model_type} makes for these ids ({len(differ)} of {real.sum()} differ; the "
        f"first at {at}: {given[at]} vs {own[at]}): they are used as given",
        file=sys.stderr,
    )


def warn_unmasked_padding(config, input_ids: np.ndarray) -> None:
    """One line on stderr where a family that zeroes padding (DeBERTa) gets ids holding its
    pad id and no mask: every token counts as real, which a port that zeroes padding by the
    ids, or one that forgets to, would not show."""
    pad = config.pad_token_id
    if not config.family.masks_padding or pad is None:
        return
    padding = int((input_ids == pad).sum())
    if not padding:
        return
    print(
        f"npbert: warning: --ids-file holds the pad id {pad} ({padding} "
        f"of {input_ids.size} ids), and no --attention-mask-file is given: every token counts "
        f"as real, where {config.model_type} zeroes the padding the mask marks",
        file=sys.stderr,
    )


def check_id_files(args, config, input_ids, token_type_ids, position_ids, attention_mask) -> None:
    """The files' arrays checked as embed() checks them, an error naming the file as well as
    the array and index ("--ids-file ids.npy: input_ids[0, 2] = -1 is out of range ...")."""
    from npbert.layer.inputs import prepare_inputs

    try:
        prepare_inputs(config, input_ids, token_type_ids, position_ids, attention_mask)
    except InputError as error:
        name = next((n for n in ID_FILES if str(error).startswith(n)), None)
        path = None if name is None else getattr(args, ID_FILES[name])
        if path is None:  # a default the file did not give
            raise
        option = flag(ID_FILES[name])
        raise InputError(f"{option} {path}: {error}") from None


def run_embed(args) -> int:
    from npbert.layer.fast import apply_projection
    from npbert.model import embed, embed_stages

    if args.input is not None:
        return run_embed_corpus(args)
    given = [name for name, default in CORPUS_DEFAULTS.items() if getattr(args, name) != default]
    if given:
        option = flag(given[0])
        raise InputError(f"{option} goes with --input (a corpus); it does nothing here")

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
        warnings.warn("NaN or Inf in the output", RuntimeWarning, stacklevel=1)  # say_warnings
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


def warn_float32(cause: str) -> None:
    """One line on stderr, in place of NumPy's RuntimeWarnings, where float32 cannot give
    every token a number: the output is still written, as torch would compute it."""
    print(
        f"npbert: warning: {cause} (npbert inspect shows them), and the tokens that use them "
        "embed as NaN, Inf or wrong values (embed(..., dtype=np.float64) computes the large "
        "ones)",
        file=sys.stderr,
    )


def warn_ahead(trouble: str) -> None:
    """warn_float32 before a job, for float32_trouble's finding, in place of NumPy's warnings
    during it."""
    warn_float32(trouble)
    warnings.simplefilter("ignore", RuntimeWarning)  # said: until run() ends


def check_float32(weights, dtype: str) -> None:
    """For a corpus: one warning line, ahead of the run, if float32 cannot compute every token
    with these weights, and none of NumPy's from the layer after it; and one if the outputs
    may exceed float16's range, where the shards are float16."""
    trouble = float32_trouble(weights)
    if trouble:
        warn_ahead(trouble)
    largest = largest_output(weights)
    if dtype == "float16" and largest > float(np.finfo(np.float16).max):
        print(
            f"npbert: warning: this checkpoint's outputs may reach {largest:.3g}, past float16's "
            "largest number (65504): those values are written as Inf; use --dtype float32",
            file=sys.stderr,
        )


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
        from npbert.model import Embedder
        from npbert.stream.corpus import embed_corpus

        embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
        check_float32(embedder.weights, args.dtype)
        index = embed_corpus(embedder, args.input, args.out, **options)
    counts = [(index["texts"], "text"), (index["tokens"], "token"), (len(index["shards"]), "shard")]
    texts, tokens, shards = (f"{n:,} {noun}{'' if n == 1 else 's'}" for n, noun in counts)
    say(f"embedded {texts}, {tokens}, in {shards}: {args.out}")
    return 0


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


def to_json(value) -> str:
    """Standard JSON (RFC 8259), which has no NaN or infinity: those numbers (a candidate's
    NaN, a relative error over a zero) go as the strings "NaN", "Infinity", "-Infinity",
    which float() in Python and Number() in JavaScript read back."""

    def finite(v):
        if isinstance(v, dict):
            return {key: finite(item) for key, item in v.items()}
        if isinstance(v, list | tuple):
            return [finite(item) for item in v]
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
        return v

    return json.dumps(finite(value), indent=1, allow_nan=False)


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


def metadata(weights, **inputs) -> dict:
    return {
        "npbert": __version__,
        **weights.source,
        **inputs,
        "model_type": weights.config.model_type,
        "layer_norm_eps": weights.config.layer_norm_eps,
    }


def save(path: Path, output: str, arrays: dict[str, np.ndarray], meta: dict) -> int:
    """Write .npz (all arrays and a `metadata` JSON string) or .npy (arrays[output], the
    embeddings or their projection), atomically: a temporary file renamed into place, so an
    interrupted run leaves no partial file."""
    from npbert.atomic import check_output_file, write_atomically

    check_output_file(path, "--out", (".npz", ".npy"))
    if path.suffix.lower() == ".npz":
        write_atomically(path, lambda f: np.savez(f, **arrays, metadata=np.array(json.dumps(meta))))
    else:
        write_atomically(path, lambda f: np.save(f, arrays[output]))
    say(f"wrote {path}: {output} {arrays[output].shape} {arrays[output].dtype}")
    return 0


def describe(config) -> str:
    """One line on what a checkpoint's embedding layer is."""
    positions = "no position table"
    if config.max_position_embeddings is not None:
        positions = f"{config.max_position_embeddings} positions ({config.positions})"
    types = "no token-type table"
    if config.type_vocab_size:
        types = f"{config.type_vocab_size} token type{'s' * (config.type_vocab_size != 1)}"
    return (
        f"{config.model_type}: {config.formula}; vocab {config.vocab_size}, width "
        f"{config.embedding_size}, hidden {config.hidden_size}, {positions}, {types}, "
        f"eps {config.layer_norm_eps:g}"
    )


def summary(weights, name: str, embeddings: np.ndarray, tokens, texts, ids=None) -> str:
    """A few readable lines: the model, the shape, and per sequence its tokens and end rows."""
    from npbert.analysis.explain import format_row

    batch = embeddings if embeddings.ndim == 3 else embeddings[None]  # (B, L, H)
    lines = [
        f"model: {weights.source.get('model')}",
        f"   {describe(weights.config)}",
        f"{name}: {embeddings.shape} {embeddings.dtype}",
    ]
    for b, rows in enumerate(batch):
        lines.append("")
        if texts is not None:
            real = tokens[b]  # the text's own tokens: padding is not among them
            lines.append(f"[{b}] {texts[b]}")
            lines.append(f"    {len(real)} tokens: {' '.join(real)}")
            lines.append(f"    input_ids: {' '.join(map(str, ids[b, : len(real)]))}")
            rows = rows[: len(real)]  # (L_b, H): padding is not the text's
        else:
            lines.append(f"[{b}] {rows.shape[0]} tokens")
        if len(rows):  # a tokenizer without special tokens gives an empty text none
            lines.append(f"    first {format_row(rows[0])}")
            lines.append(f"    last  {format_row(rows[-1])}")
    return "\n".join(lines)


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
    from npbert.model import Embedder

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


def refuse_batches(args, shape: tuple) -> None:
    """InputError for --ids-file ids that are not one sequence's, (L,) or (1, L)."""
    if len(shape) != 1 and (len(shape) != 2 or shape[0] != 1):
        raise InputError(
            f"--ids-file {args.ids_file}: explain walks through one sequence, (L,) or (1, L) "
            f"ids, not {shape}"
        )


def one_sequence(input_ids, *others) -> tuple:
    """--ids-file's ids, (L,) or (1, L), and the others of its shape (checked by read_ids) as
    one sequence's, (L,): a file of one row is taken as its row; (L,) positions are every
    row's."""
    if np.ndim(input_ids) == 1:
        return input_ids, *others
    rows = (a if a is None or np.ndim(a) == 1 else np.asarray(a)[0] for a in others)
    return np.asarray(input_ids)[0], *rows


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
    for key in ("layer_norm_eps", "pad_token_id", "positions", "padding_idx", "max_length"):
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
    from npbert.loading.tokenize import tokenizer_file
    from npbert.model import Embedder, load_weights

    family = load_weights(directory).config.family
    if tokenizer_file(directory, vocab_txt=family.vocab_txt) and not family.no_text:
        Embedder.from_pretrained(directory)


def run_fetch(args) -> int:
    from npbert.loading import hub

    if not args.model:  # Path("") is the current directory
        raise InputError("the repo id is empty: give a Hub repo id, such as bert-base-uncased")
    if Path(args.model).expanduser().is_dir():
        raise InputError(f"{args.model} is a local directory; fetch takes a Hub repo id")
    if args.quiet:
        hub.check_hub_variables()  # which importing huggingface_hub reads
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()  # huggingface_hub's and npbert's bars alike
    fetched = hub.fetch(
        args.model,
        revision=args.revision,
        full=args.full,
        token=args.token,
        cache_dir=args.cache_dir,
        local_files_only=args.offline,
    )
    check_tokenizer(fetched.directory)
    if args.quiet:
        say(fetched.directory)
        return 0
    source = fetched.source
    say(f"{source['model']} at {source['commit']} ({source['revision']})")
    if fetched.repaired:
        say(f"repaired: the cached copy was damaged ({fetched.repaired})")
    if fetched.cached:
        say(f"already cached: nothing downloaded ({source['weights']})")
    else:
        share = fetched.fetched_bytes / fetched.full_bytes if fetched.full_bytes else 1.0
        held, shards = fetched.shards
        of = f" in the {held} of {shards} shards holding the embeddings" if held < shards else ""
        say(
            f"downloaded {fetched.fetched_bytes:,} bytes of weights out of {fetched.full_bytes:,}"
            f"{of} ({share:.1%}): {source['weights']}"
        )
    say(f"cached in {fetched.directory}")
    return 0


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
    from npbert.analysis.positions import analyse, format_report
    from npbert.analysis.positions_plot import check_plot_path, plot_positions

    if args.plot is not None:
        check_plot_path(args.plot)
    weights = npbert.load_weights(args.model, revision=args.revision, full=args.full)
    model, config = weights.source.get("model", str(args.model)), weights.config
    if weights.position_embeddings is None:
        raise InputError(
            f"{model}: {config.model_type} has no learned position table (its positions are "
            "computed in attention, e.g. rotary): there is nothing to compare"
        )
    # RoBERTa's rows up to padding_idx are never a real token's position: the table starts after.
    first = 0 if config.padding_idx is None else config.padding_idx + 1
    table = weights.position_embeddings[first:]
    length = args.pretraining_length
    if length is not None and not 1 <= length <= len(table):
        raise InputError(
            f"--pretraining-length {length}: give 1 to the table's {len(table)} positions"
        )
    figures = analyse(table, pretraining_length=length)
    figures = {"model": model, "model_type": config.model_type, "first_row": first, **figures}
    if args.plot is not None:  # drawn first: a file it cannot write leaves no report behind
        title = "/".join(Path(model).parts[-2:]) if Path(model).is_dir() else model
        plot_positions(table, figures, args.plot, title=title)
    header = f"model: {model}\n"
    if first:  # as figures["first_row"] says in JSON
        header += (
            f"rows {first}..{first + len(table) - 1} of its position table: "
            f"{config.model_type} numbers real tokens from padding_idx + 1 (position 0 below is "
            f"row {first})\n"
        )
    say(to_json(figures) if args.json else header + format_report(figures))
    if args.plot is not None:
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":  # python -m npbert.cli, as the tests and the bench run it
    from npbert.__main__ import finish

    sys.exit(finish(main()))
