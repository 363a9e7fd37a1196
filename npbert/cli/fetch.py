"""npbert fetch: a Hub model's embedding tensors into the cache."""

from pathlib import Path

from npbert.cli.inspect import check_tokenizer
from npbert.cli.options import add_revision, command
from npbert.cli.output import say
from npbert.errors import InputError


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
