"""How the Hub and its cache are reached: the caller's arguments, the environment variables
huggingface_hub reads, the Hub's address and the timeouts."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from npbert.errors import InputError, warn
from npbert.layer.inputs import check_path

TIMEOUT_VARIABLES = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")  # seconds, as int()
# Seconds to wait for the Hub's first answer unless HF_HUB_ETAG_TIMEOUT says otherwise:
# huggingface_hub's own default is 10 s, which with the interpreter's start would put an
# unreachable Hub's error past 10 s.
FIRST_ANSWER_TIMEOUT = 5
# What follows a repo id in the Hub's web addresses (/ORG/NAME/tree/REVISION/...).
WEB_PAGES = ("tree", "blob", "resolve", "commit", "commits", "discussions")


@dataclass(frozen=True)
class Access:
    """How to reach the Hub and its cache, with huggingface_hub's meanings: token (a string,
    True for the saved one, False for none, None for the default), cache_dir (default
    HF_HUB_CACHE), local_files_only (the cache only, as HF_HUB_OFFLINE=1)."""

    token: str | bool | None = None
    cache_dir: str | Path | None = None
    local_files_only: bool = False

    def __post_init__(self):
        if self.cache_dir is not None and not check_path("cache_dir", self.cache_dir):
            raise InputError("the cache directory is empty: give one, or none for HF_HUB_CACHE")
        if self.cache_dir is not None:  # ~ expanded once, for every call: hf_hub_download
            # expands it and try_to_load_from_cache does not, which would miss what it cached
            object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
            if self.cache_dir.exists() and not self.cache_dir.is_dir():
                raise InputError(f"{{cache_dir}} {self.cache_dir} is not a directory")
        if not (self.token is None or isinstance(self.token, str | bool)):
            raise InputError(
                f"{{token}} must be a string, True for the saved one or False for none, not "
                f"{type(self.token).__name__}"
            )
        if self.token == "":
            raise InputError("the token is empty: give one, or none for the saved one")

    @property
    def offline(self) -> bool:
        from huggingface_hub import constants

        return self.local_files_only or bool(constants.HF_HUB_OFFLINE)

    @property
    def cache(self) -> Path:
        from huggingface_hub import constants

        return self.cache_dir or Path(constants.HF_HUB_CACHE).expanduser()


def named_at(repo_id: str, revision: str | None) -> str:
    """The repo, and the revision where one was asked for: "ORG/NAME at revision R"."""
    return f"{repo_id}" + (f" at revision {revision}" if revision else "")


def check_revision(revision) -> None:
    """InputError unless revision is None (main) or a branch, tag or commit's name."""
    if revision is not None and not isinstance(revision, str):
        raise InputError(
            f"{{revision}} must be a string (a branch, tag or commit), not "
            f"{type(revision).__name__}"
        )
    if revision == "":
        raise InputError("the revision is empty: give a branch, tag or commit, or none for main")


def check_not_url(model) -> None:
    """A repo's web address, pasted from a browser, is refused with the repo id it names."""
    if not isinstance(model, str):
        return  # Access and huggingface_hub's validation name those
    parts = urlsplit(model)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if segments[:1] == ["models"]:  # the Hub's listing, /models/..., not a repo
        segments = []
    cut = next((i for i, s in enumerate(segments) if s in WEB_PAGES), min(len(segments), 2))
    repo_id, rest = "/".join(segments[:cut]), segments[cut:]
    advice = f": give the repo id, {repo_id}" if repo_id else ": give the repo id, ORG/NAME"
    if rest[:1] in (["tree"], ["blob"], ["resolve"]) and rest[1:2] not in ([], ["main"]):
        advice += f", and the revision {rest[1]}"
    raise InputError(
        f"{model} is a web address{advice} (a Hub other than huggingface.co is set with "
        "HF_ENDPOINT)"
    )


def check_hub_variables() -> None:
    """The environment variables huggingface_hub reads when it is imported, checked before it
    is: HF_ENDPOINT, if set, must split as an address (the import splits it, so that
    "http://[::1" is a ValueError from the import); HF_HUB_ETAG_TIMEOUT and
    HF_HUB_DOWNLOAD_TIMEOUT, if set, whole numbers of seconds, 1 or more (the import reads
    them with int(); a negative number is refused by the HTTP client in the middle of a
    request, and 0 replaced with huggingface_hub's default of 10 s)."""
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint is not None:  # only what fails the import: a cached model loads with no
        # request, whatever it says, and a request to it names what is wrong with it
        try:
            urlsplit(endpoint).port  # noqa: B018 -- the port is checked when read
        except ValueError as error:
            raise InputError(f"HF_ENDPOINT={endpoint!r} is not an address ({error})") from None
    for name in TIMEOUT_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            seconds = int(value)
        except ValueError:
            seconds = 0
        if seconds < 1:
            raise InputError(f"{name}={value!r} is not a whole number of seconds, 1 or more")


def hub_address() -> str:
    """The Hub's address as huggingface_hub requests it, for messages: HF_ENDPOINT set but
    empty leaves none (huggingface_hub 1.x and later take the empty string as given)."""
    from huggingface_hub import constants

    return constants.ENDPOINT or "HF_ENDPOINT='' (no address)"


def first_answer_timeout() -> float:
    """Seconds to wait for an answer to a metadata request: HF_HUB_ETAG_TIMEOUT when set."""
    from huggingface_hub import constants

    if "HF_HUB_ETAG_TIMEOUT" in os.environ:
        return constants.HF_HUB_ETAG_TIMEOUT
    return FIRST_ANSWER_TIMEOUT


def download_timeout() -> float:
    """Seconds to wait for bytes: HF_HUB_DOWNLOAD_TIMEOUT, as huggingface_hub reads it."""
    from huggingface_hub import constants

    return constants.HF_HUB_DOWNLOAD_TIMEOUT


@contextmanager
def notice_after(seconds: float, message: str) -> Iterator[threading.Timer]:
    """Warn of `message` if the block, or the timer it is given, is not done in `seconds`: a
    wait that shows no sign of life otherwise."""
    timer = threading.Timer(seconds, warn, args=(message,))
    timer.daemon = True
    timer.start()
    try:
        yield timer
    finally:
        timer.cancel()
