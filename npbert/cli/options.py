"""The command's parser and the options several commands share."""

import argparse
import textwrap
from pathlib import Path

from npbert.errors import InputError
from npbert.verify.tolerances import check_tolerance

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


TOKEN_ELSEWHERE = (
    "--token is an option of npbert fetch alone (the value given is not shown): fetch the "
    "model with it first, and this command reads the cache; or set HF_TOKEN"
)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line, as every other npbert error is, and no
    option taken from a prefix of its name (`--token` was taken for --token-type-ids-file, its
    value, a secret, printed as a missing file)."""

    see = ""  # the command that shows this parser's help, where not `PROG --help`

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.see or self.prog + ' --help'})\n")


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
