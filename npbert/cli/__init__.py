"""The `npbert` command: embed, explain, compare, vectors, inspect, fetch, positions.

Bad input exits 2 with one line naming what is wrong, a corpus worker lost exits 1 with one
line; a traceback is a bug.
"""

import argparse
import signal
import sys
import threading

from npbert import __version__
from npbert.cli.compare import add_compare
from npbert.cli.corpus import is_corpus
from npbert.cli.embed import add_embed
from npbert.cli.errors import STOPPING, run
from npbert.cli.explain import add_explain
from npbert.cli.fetch import add_fetch
from npbert.cli.inspect import add_inspect
from npbert.cli.options import TOKEN_ELSEWHERE, Parser
from npbert.cli.positions import add_positions_parser
from npbert.cli.vectors import add_vectors


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(corpus=is_corpus(argv))
    # TEXT arguments may come after the options (`compare C --model M TEXT`); argparse leaves
    # those over, and they are texts as long as none looks like an option, or they follow --.
    args, extra = parser.parse_known_args(argv)
    if extra:
        dashes = extra.index("--") if "--" in extra else len(extra)
        if any(e.split("=")[0] == "--token" for e in extra[:dashes]):  # not fetch: its value
            args.parser.error(TOKEN_ELSEWHERE)  # is a secret, not to be echoed to a log
        if not hasattr(args, "texts") or any(e.startswith("-") for e in extra[:dashes]):
            args.parser.error(f"unrecognized arguments: {' '.join(extra)}")  # its own parser
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


def build_parser(corpus: bool = False) -> argparse.ArgumentParser:
    """The command's parser; `corpus`: with embed's corpus form (npbert.cli.corpus)."""
    parser = Parser(
        prog="npbert",
        description="The embedding layer of BERT and its family of encoders, in NumPy: the "
        "input embeddings the first encoder layer receives (not contextual or sentence "
        "embeddings).",
        epilog="Run 'npbert COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    add_embed(commands, corpus)
    add_explain(commands)
    add_compare(commands)
    add_vectors(commands)
    add_inspect(commands)
    add_fetch(commands)
    add_positions_parser(commands)
    return parser
