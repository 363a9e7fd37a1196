"""Checkpoints from the Hugging Face Hub, fetching only the embedding tensors.

bert-base-uncased's model.safetensors is 440 MB, its embedding tensors 94 MB. A repo id
resolves to a small checkpoint directory inside the repo's own snapshot in the Hub cache, so
that huggingface_hub's cache tools (`hf cache ls`, `hf cache rm`, scan_cache_dir) count it and
delete it with the revision:

    {cache}/models--{org}--{name}/snapshots/{commit}/
        config.json, tokenizer.json | vocab.txt, tokenizer_config.json   (hf_hub_download)
        npbert-embeddings/      npbert's: the embedding tensors only, fetched with HTTP Range
            model.safetensors   requests and written as stored, and copies of the files above
    {cache}/.locks/models--{org}--{name}/npbert.lock

{cache} is cache_dir, else HF_HUB_CACHE. Requests go through huggingface_hub's session with its
headers and token (token=, HF_TOKEN or `hf auth login`); npbert parses and checks each weights
file's header itself (npbert.loading.header) and checks every range it gets
(npbert.loading.ranges). The directory is built under a temporary name and renamed into place
under the lock, so an interrupted fetch never leaves anything that loads, two processes can
fetch at once, and the temporaries an interrupted fetch leaves are removed by the next one.

A cached model loads with no network call, a branch or tag through the Hub cache's refs;
`npbert fetch` asks the Hub again and repairs a damaged entry. With full=True (`--full`) the
whole weights file is downloaded with hf_hub_download instead.
"""

import errno
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import threading
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np

from npbert.atomic import building_directory
from npbert.errors import InputError, first_line, warn
from npbert.layer.inputs import check_flag, check_path
from npbert.loading.checkpoint import (
    INDEX_FILE,
    WEIGHTS_FILE,
    checked_config,
    describe,
    embedding_tensor_names,
    locate_checkpoint,
    no_safetensors,
    read_index,
)
from npbert.loading.config import JSON_ERRORS, read_config
from npbert.loading.header import (
    TensorHeader,
    header_length,
    parse_header,
    read_file_header,
    require_floats,
)
from npbert.loading.ranges import RangeIgnored, get_range, network_errors

EMBEDDINGS_DIR = "npbert-embeddings"  # in a snapshot; no Hub repo is expected to have one
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
GAP = 1 << 16  # tensors closer than this in a file are fetched with one Range request
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # for TensorSpec
TIMEOUT_VARIABLES = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")  # seconds, as int()
# Seconds to wait for the Hub's first answer unless HF_HUB_ETAG_TIMEOUT says otherwise:
# huggingface_hub's own default is 10 s, which with the interpreter's start would put an
# unreachable Hub's error past 10 s.
FIRST_ANSWER_TIMEOUT = 5


class NotFound(InputError):
    """The name is neither on the Hub nor in the cache (no such repo, or the Hub unreachable),
    nor, from resolve, a directory here."""


class Unreachable(NotFound):
    """The Hub could not be reached (`reach` says so, with the reason where one is known), and
    what was asked for is not in the cache."""

    def __init__(self, reach: str, what: str):
        super().__init__(
            f"{reach} and {what} is not cached: connect, or set HF_ENDPOINT, and run `npbert "
            "fetch` once"
        )
        self.reach = reach


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
            # expands it, try_to_load_from_cache does not, and a cached model was not found
            object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
            if self.cache_dir.exists() and not self.cache_dir.is_dir():
                raise InputError(f"cache_dir {self.cache_dir} is not a directory")
        if not (self.token is None or isinstance(self.token, str | bool)):
            raise InputError(
                f"token must be a string, True for the saved one or False for none, not "
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


@dataclass(frozen=True)
class Fetched:
    """What a fetch did: where the checkpoint is and how many bytes it took."""

    directory: Path
    source: dict
    fetched_bytes: int  # of the weights file(s): headers and tensor ranges
    full_bytes: int  # size of the weights file(s) on the Hub: the shards holding embeddings
    cached: bool  # found in the cache, nothing downloaded
    repaired: str | None = None  # what was wrong with the cached entry fetched again
    shards: tuple[int, int] = (1, 1)  # of a download: (shards full_bytes counts, all shards)


def resolve(
    model: str | os.PathLike,
    *,
    revision: str | None = None,
    full: bool = False,
    token: str | bool | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> tuple[Path, dict]:
    """(directory holding config.json, tokenizer and weights, source metadata)."""
    full = check_flag("full", full)
    local_files_only = check_flag("local_files_only", local_files_only)
    Access(token, cache_dir, local_files_only)  # checks them, for a directory too
    model = check_path("model", model)
    if not model:  # Path("") is the current directory
        raise InputError("the model is empty: give a checkpoint directory or a Hub repo id")
    path = Path(model).expanduser()
    if path.is_dir():
        for option, given in (("a revision", revision is not None), ("full", full)):
            if given:
                raise InputError(f"{option} applies to Hub repo ids, and {model} is a directory")
        return path, {"model": str(path.resolve())}
    if path.is_file():
        raise InputError(f"{model} is a file: give the checkpoint directory that holds it")
    check_not_url(model)
    if model.startswith((".", "/", "~")):
        raise NotFound(f"{model}: no such checkpoint directory")
    if model.count("/") > 1:
        raise NotFound(
            f"{model}: no such checkpoint directory, and not a Hub repo id, which is ORG/NAME "
            "(npbert does not read a checkpoint kept in a subfolder of a repo)"
        )
    try:
        fetched = fetch(
            model,
            revision=revision,
            full=full,
            refresh=False,
            token=token,
            cache_dir=cache_dir,
            local_files_only=local_files_only,
        )
    except NotFound as error:  # a mistyped directory name ends up here, so say both
        raise NotFound(f"{error.message}; no local directory named {model} exists either") from None
    return fetched.directory, fetched.source


def fetch(
    repo_id: str,
    *,
    revision: str | None = None,
    full: bool = False,
    refresh: bool = True,
    token: str | bool | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> Fetched:
    """The checkpoint of a Hub repo, from the cache unless `refresh`, else from the Hub (a
    damaged cached entry is fetched again). local_files_only: from the cache, or an error."""
    check_hub_variables()
    access = Access(token, cache_dir, local_files_only)
    check_not_url(repo_id)
    check_revision(revision)
    try:
        with hub_errors(repo_id, revision, access), quiet_library_logs():
            if not refresh or access.offline:
                cached = from_cache(repo_id, revision, full, access)
                if cached is not None:
                    return cached
            if access.offline:
                at = named_at(repo_id, revision)  # what is missing
                if full and cut_cached(repo_id, revision, access):
                    at = f"the whole weights file of {at} (only its embedding tensors are cached)"
                raise NotFound(
                    f"{at} is not in the cache {access.cache} and the Hub is not to be asked "
                    "(HF_HUB_OFFLINE, --offline or local_files_only): allow it once to fetch it"
                )
            return download(repo_id, revision, full, access)
    except Unreachable as error:  # from any request, as hub_errors names it
        raise unreachable(error, repo_id, revision, full, access) from None


def named_at(repo_id: str, revision: str | None) -> str:
    """The repo, and the revision where one was asked for, as messages name what they are
    about: "ORG/NAME at revision R"."""
    return f"{repo_id}" + (f" at revision {revision}" if revision else "")


def cut_cached(repo_id: str, revision: str | None, access: Access) -> bool:
    """Whether npbert's cut of the weights is cached, damaged or not."""
    try:
        return from_cache(repo_id, revision, False, access) is not None
    except InputError:  # damaged: cached all the same
        return True


def unreachable(error: Unreachable, repo_id, revision, full: bool, access: Access) -> InputError:
    """The error of a fetch that could not reach the Hub: `error`, or where a copy is cached
    (fetch asks the Hub for a newer commit first), that the copy still loads."""
    try:
        cached = from_cache(repo_id, revision, full, access)
    except InputError as damaged:  # the fetch that would repair it is what failed
        return InputError(f"{error.reach}, and {damaged}")
    if cached is None:
        return error
    at = named_at(repo_id, revision)
    return InputError(
        f"{error.reach}, to check {at} for a newer commit; the copy cached at "
        f"{cached.source['commit'][:12]} still loads (only `npbert fetch` asks the Hub first)"
    )


def check_revision(revision) -> None:
    """InputError unless revision is None (main) or a branch, tag or commit's name."""
    if revision is not None and not isinstance(revision, str):
        raise InputError(
            f"revision must be a string (a branch, tag or commit), not {type(revision).__name__}"
        )
    if revision == "":
        raise InputError("the revision is empty: give a branch, tag or commit, or none for main")


# What follows a repo id in the Hub's web addresses (/ORG/NAME/tree/REVISION/...).
WEB_PAGES = ("tree", "blob", "resolve", "commit", "commits", "discussions")


def check_not_url(model) -> None:
    """A repo's web address, pasted from a browser, is refused with the repo id it names."""
    if not isinstance(model, str):
        return  # Access and hf's validation name those
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


def from_cache(repo_id: str, revision: str | None, full: bool, access: Access) -> Fetched | None:
    """A cached checkpoint, found with no network call, or None; InputError if it is damaged."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(
        repo_id, "config.json", cache_dir=access.cache_dir, revision=revision
    )
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    commit = snapshot.name
    candidates = [snapshot] if full else [snapshot / EMBEDDINGS_DIR, snapshot]
    for directory in candidates:
        entry = directory != snapshot  # npbert's cut of the weights, not the snapshot's own
        if entry:
            present = directory.exists() or directory.is_symlink()
        else:
            present = (directory / WEIGHTS_FILE).is_file() or holds_shards(directory, snapshot)
        if not present:
            continue
        problem = entry_damage(directory, snapshot) if entry else damage(directory)
        if problem is not None:
            raise InputError(
                f"the cached {repo_id} at {commit[:12]} is damaged ({problem}): run "
                f"`{repair_command(repo_id, revision, entry, access)}` to repair it"
            )
        source = _source(repo_id, revision, commit, partial=entry)
        return Fetched(directory, source, 0, _weights_size(directory), True)
    return None


def repair_command(repo_id: str, revision: str | None, entry: bool, access: Access) -> str:
    """The fetch that downloads again what was asked for: the same revision, cache and cut."""
    options = [] if entry else ["--full"]
    if revision is not None:
        options += ["--revision", revision]
    if access.cache_dir is not None:
        options += ["--cache-dir", os.fspath(access.cache_dir)]
    return shlex.join(["npbert", "fetch", *options, repo_id])


def holds_shards(directory: Path, snapshot: Path) -> bool:
    """Whether a cached index comes with the shards holding the embedding tensors. A fetch
    that failed after downloading the index (an index that names a shard the repo lacks,
    or puts a tensor in a shard without it) leaves the index alone: that is not a cached
    checkpoint, and asking the Hub again reports what is wrong with the repo."""
    if not (directory / INDEX_FILE).is_file():
        return False
    try:
        weight_map = read_index(directory / INDEX_FILE)
    except InputError:  # not an index at all: the Hub is asked again, and the error named
        return False
    try:
        names = embedding_tensors(weight_map, read_config(snapshot), INDEX_FILE).values()
        return all((directory / weight_map[name]).is_file() for name in names)
    except (ValueError, KeyError, TypeError):  # damage() says what is wrong
        return True


def entry_damage(entry: Path, snapshot: Path) -> str | None:
    """What is wrong with an npbert-embeddings entry, or None. An entry is renamed into place
    whole, with its weights file and a copy of every small file of the snapshot's, so a file
    missing from it was removed since (by hand, by a cleaning tool)."""
    if not entry.is_dir():
        return f"{entry} is not a directory"
    copies = [name for name in SMALL_FILES if (snapshot / name).is_file()]
    missing = [name for name in (WEIGHTS_FILE, *copies) if not (entry / name).is_file()]
    if missing:
        return f"{entry} lacks {', '.join(missing)}"
    differing = disagreeing_copies(entry, snapshot)  # one cut short, or written over
    if differing:
        name = differing[0]
        size, copied = (snapshot / name).stat().st_size, (entry / name).stat().st_size
        return (
            f"{entry / name} and the snapshot's {name} differ in size ({copied:,} and "
            f"{size:,} bytes)"
        )
    problem = damage(entry)
    if problem is not None:
        return problem
    # another repo's or commit's entry, copied in (by hand, a sync tool): its record says so
    record = npbert_record(entry / WEIGHTS_FILE)
    if not {"repo", "commit"} <= record.keys():  # an older npbert's record: nothing to compare
        return None
    from huggingface_hub.file_download import repo_folder_name

    held = (repo_folder_name(repo_id=str(record["repo"]), repo_type="model"), record["commit"])
    if held != (snapshot.parent.parent.name, snapshot.name):
        return f"{entry} holds {record['repo']} at {record['commit']}"
    return None


def disagreeing_copies(entry: Path, snapshot: Path) -> list[str]:
    """The small files whose copy in the entry and the snapshot's are not the same size (the
    same commit's file: one of them was cut short or written over)."""
    return [
        name
        for name in SMALL_FILES
        if (snapshot / name).is_file()
        and (entry / name).is_file()
        and (snapshot / name).stat().st_size != (entry / name).stat().st_size
    ]


def damage(directory: Path) -> str | None:
    """What is wrong with a cached checkpoint's weights (truncated, overwritten), or None.

    Only the headers and file sizes are read, so that loading stays cheap."""
    if (directory / WEIGHTS_FILE).is_file():
        return damage_of_file(directory / WEIGHTS_FILE)
    try:
        weight_map = read_index(directory / INDEX_FILE)
    except InputError as error:  # as holds_shards reads it
        return str(error)
    try:  # the shards holding the embeddings: another (which transformers, sharing the
        # cache, may have left damaged) is neither read nor repaired by `fetch --full`
        names = embedding_tensors(weight_map, read_config(directory), INDEX_FILE).values()
        shards = sorted({weight_map[name] for name in names})
    except InputError:  # the config's problem, named when it loads: every shard for now
        shards = sorted(set(weight_map.values()))
    for shard in shards:
        problem = damage_of_file(directory / shard) if (directory / shard).is_file() else None
        if problem is not None:
            return problem
    return None


def npbert_record(path: Path) -> dict:
    """The record _serialize keeps in an embedding-only file's metadata (repo, commit, files,
    full_bytes), or {} where the file has none (one npbert did not cut) or another."""
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        recorded = (f.metadata() or {}).get("npbert", "{}")
    try:
        record = json.loads(recorded)
    except JSON_ERRORS:
        return {}
    return record if isinstance(record, dict) else {}


def _weights_size(directory: Path) -> int:
    """Size on the Hub of the weights an embedding-only file was cut from (or of the files)."""
    single = directory / WEIGHTS_FILE
    if single.is_file():
        full = npbert_record(single).get("full_bytes")
        size = single.stat().st_size
        # a record npbert wrote, or a file npbert did not cut (its own record, or none): its size
        return full if type(full) is int and full >= size else size
    shards = set(read_index(directory / INDEX_FILE).values())  # checked by damage() before
    return sum((directory / s).stat().st_size for s in shards if (directory / s).is_file())


def _source(repo_id: str, revision: str | None, commit: str, partial: bool) -> dict:
    return {
        "model": repo_id,
        "revision": revision or "main",
        "commit": commit,
        "weights": "embedding tensors only" if partial else "full file",
    }


def download(repo_id: str, revision: str | None, full: bool, access: Access) -> Fetched:
    """Fetch from the Hub: small files whole, then the weights (ranges, or whole with full)."""
    info = model_info(repo_id, revision, access)
    # config.json by the revision asked for: this records the branch or tag in the Hub
    # cache's refs, so later loads find it with no request.
    snapshot = Path(_hf_download(repo_id, "config.json", revision, access)).parent
    commit = snapshot.name
    if commit != info.sha:  # the branch moved between the two requests
        info = model_info(repo_id, commit, access)
    files = {s.rfilename for s in info.siblings or []}
    if WEIGHTS_FILE not in files and INDEX_FILE not in files:
        raise no_safetensors(f"{repo_id} at {commit[:12]}", sorted(files))
    for name in SMALL_FILES[1:]:  # the tokenizer files there are
        if name in files:
            _hf_download(repo_id, name, commit, access)
    config = read_config(snapshot)
    fetched = None if full else whole_cached(repo_id, revision, snapshot, access)
    if fetched is None and not full:
        try:
            fetched = fetch_embeddings(repo_id, revision, commit, files, snapshot, config, access)
        except RangeIgnored as answer:
            warn(
                f"the server did not answer the Range request for {repo_id} with the part asked "
                f"(it answered {answer}); downloading the whole weights file instead"
            )
    if fetched is None:
        fetched = _download_whole(repo_id, revision, commit, files, snapshot, config, access)
    locate_checkpoint(fetched.directory)  # config.json against the tensors, as a load checks
    return fetched


def whole_cached(repo_id: str, revision: str | None, snapshot: Path, access: Access):
    """The whole weights of the commit, as Fetched, where a fetch with full cached them whole
    and sound and npbert has cut no entry of its own: they load as they are (from_cache takes
    them too), and range-fetching their embedding tensors again would download them twice.
    None otherwise: the entry, sound or to repair, is fetch_embeddings' to answer for."""
    entry, commit = snapshot / EMBEDDINGS_DIR, snapshot.name
    if entry.exists() or entry.is_symlink():
        return None
    try:
        found = from_cache(repo_id, commit, True, access)
    except InputError:  # damaged: fetch_embeddings cuts an entry of its own instead
        return None
    if found is None:
        return None
    return replace(found, source=_source(repo_id, revision, commit, partial=False))


def model_info(repo_id: str, revision: str | None, access: Access):
    """The repo's commit and file list at `revision`.

    npbert's first request to the Hub, made with a bounded timeout and no retries: an
    unreachable Hub, or one that never answers, is reported at once. (huggingface_hub's
    downloads retry a first request that fails, for up to several minutes.)"""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError, HFValidationError

    try:
        return HfApi().model_info(
            repo_id, revision=revision, token=access.token, timeout=first_answer_timeout()
        )
    except (HfHubHTTPError, HFValidationError):  # an answer (in 0.x one of requests' errors
        # too), or a repo id refused before any request (a ValueError): hub_errors says which
        raise
    except json.JSONDecodeError as error:  # before network_errors: requests' is one of them
        raise not_model_info(repo_id, error) from None
    except network_errors() as error:
        reason = first_line(error)
        if timed_out(error):
            reason = f"no answer in {first_answer_timeout():g} s; HF_HUB_ETAG_TIMEOUT=S waits S s"
        raise Unreachable(f"cannot reach {hub_address()} ({reason})", repo_id) from None
    except (ValueError, TypeError, AttributeError, KeyError) as error:  # JSON, not an object
        raise not_model_info(repo_id, error) from None


def not_model_info(repo_id: str, error: Exception) -> InputError:
    """An answer that is not a Hub's model info: a login page, a server at the wrong address."""
    return InputError(
        f"{hub_address()} answered for {repo_id} with what is not a Hub's model info "
        f"({type(error).__name__}: {first_line(error)}): is HF_ENDPOINT a Hub?"
    )


def check_hub_variables() -> None:
    """The environment variables huggingface_hub reads when it is imported, checked before it
    is: HF_ENDPOINT, if set, must split as an address (huggingface_hub splits it on import,
    so that "http://[::1" is a ValueError from the import); HF_HUB_ETAG_TIMEOUT and
    HF_HUB_DOWNLOAD_TIMEOUT, if set, whole numbers of seconds, 1 or more (it reads them with
    int() on import, so that "1.5" is a ValueError too; it takes a negative number, which the
    HTTP client refuses in the middle of a request, and 0, which it replaces with its default
    of 10 s)."""
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


def _hf_download(repo_id, filename, revision, access: Access, *, small: bool = True) -> str:
    """A file of the repo, through huggingface_hub's cache; a small one says if it is slow
    (a weights file has huggingface_hub's progress bar), and is downloaded again once if its
    bytes do not hash to its blob's name (see unlike_its_name)."""
    path = _hf_download_once(repo_id, filename, revision, access, small=small)
    if small and unlike_its_name(Path(path)):
        remove_cached(Path(path))
        path = _hf_download_once(repo_id, filename, revision, access, small=small)
    return path


def unlike_its_name(path: Path) -> bool:
    """Whether a cached file's bytes differ from what its blob's name says they are: the Hub's
    ETag, which names the blob, is the sha256 of an LFS file and the git blob id (sha1) of
    another. A blob cut short or written over in the cache says so; huggingface_hub returns a
    cached file as it finds it, and an entry repaired from it would copy the damage. A name
    that is neither (a mirror's own ETags) says nothing: False."""
    name, data = path.resolve().name, path.read_bytes()
    if re.fullmatch(r"[0-9a-f]{64}", name):
        return hashlib.sha256(data).hexdigest() != name
    if re.fullmatch(r"[0-9a-f]{40}", name):
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != name
    return False


def _hf_download_once(repo_id, filename, revision, access: Access, *, small: bool) -> str:
    from huggingface_hub import hf_hub_download

    with still_waiting(filename) if small else nullcontext():
        try:
            return hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                token=access.token,
                cache_dir=access.cache_dir,
                etag_timeout=first_answer_timeout(),
            )
        except ValueError as error:  # the commit the server named would leave the snapshots
            if "pointer path" not in str(error):  # (huggingface_hub's own words)
                raise
            raise InputError(
                f"{repo_id}: the answer for {filename} names a commit that is not a commit's "
                f"name ({first_line(error)}); nothing was cached"
            ) from None


def still_waiting(filename: str):
    """Log one line if fetching a small file takes longer than its first request may. When
    that request gets no answer and nothing is cached, recent huggingface_hub (not 0.x) retries
    it with a 60 s timeout of its own, 6 times: over 6 minutes with no sign of life."""
    after = first_answer_timeout() + 2
    return notice_after(
        after,
        f"still waiting for {filename} from {hub_address()} after {after:g} s: huggingface_hub "
        "retries a request that fails or gets no answer, for up to several minutes (Ctrl-C "
        "stops)",
    )


@contextmanager
def notice_after(seconds: float, message: str):
    """Warn of `message` if the block, or the timer it is given, is not done in `seconds`: a
    wait that shows no sign of life otherwise."""
    timer = threading.Timer(seconds, warn, args=(message,))
    timer.daemon = True
    timer.start()
    try:
        yield timer
    finally:
        timer.cancel()


# Seconds the repo's lock may be held by another process before npbert says it is waiting.
LOCK_NOTICE = 3


@contextmanager
def repo_lock(path: Path, repo_id: str):
    """The repo's npbert.lock, held for the block; a wait for another process that holds it
    (fetching the same repo, or stopped with Ctrl-Z) is said after LOCK_NOTICE seconds:
    huggingface_hub logs it only at INFO, which quiet_library_logs keeps off the terminal."""
    from huggingface_hub.utils import WeakFileLock

    message = (
        f"waiting for another process fetching {repo_id}, which holds the lock {path} "
        "(Ctrl-C stops)"
    )
    with notice_after(LOCK_NOTICE, message) as notice, WeakFileLock(path):
        notice.cancel()
        yield


def embedding_tensors(names: Iterable[str], config: dict, where: str) -> dict[str, str]:
    """EmbeddingWeights field -> name of each tensor npbert reads, among a checkpoint's tensor
    names. The Hub path's one question to npbert.loading.checkpoint about which tensors make a
    model's embedding layer; config is the repo's parsed config.json, whose model_type picks
    the family's tensors, a projection included."""
    return embedding_tensor_names(config, names, where)[1]


def _download_whole(repo_id, revision, commit, files, snapshot, config, access) -> Fetched:
    """The whole weights file (or the index and the shards holding the embeddings) with
    hf_hub_download; a cached copy found damaged is downloaded again."""
    weights, shards = _weights_to_fetch(repo_id, commit, files, config, access)
    repaired = None
    for name in weights:
        path = snapshot / name
        problem = damage_of_file(path) if name != INDEX_FILE and path.is_file() else None
        if problem is not None:  # removed, for hf_hub_download to fetch again: huggingface_hub
            # 0.x returns a commit's cached file even with force_download
            remove_cached(path)
            repaired = problem
        _hf_download(repo_id, name, commit, access, small=name == INDEX_FILE)
        where = f"{repo_id}/{name} at {commit[:12]}"  # as the range path names it
        served = damage_of_file(path, where) if name != INDEX_FILE else None
        if served is not None:  # not kept: the next load would call the cache damaged
            remove_cached(path)
            raise InputError(f"{served} (as the Hub serves it; not kept in the cache)")
    size = sum((snapshot / name).stat().st_size for name in weights)
    source = _source(repo_id, revision, commit, False)
    return Fetched(snapshot, source, size, size, False, repaired, shards)


def remove_cached(path: Path) -> None:
    """Remove a file of huggingface_hub's cache: its blob, and the link to it where the cache
    has one (the snapshot's entry)."""
    path.resolve().unlink()
    path.unlink(missing_ok=True)


def damage_of_file(path: Path, where: str = "") -> str | None:
    """What is wrong with a safetensors file's header or size, or None."""
    try:
        read_file_header(path, where)
    except InputError as error:
        return str(error)
    return None


def _weights_to_fetch(repo_id, commit, files, config, access) -> tuple[list[str], tuple]:
    """The single weights file, or the index and only the shards holding the embeddings; and
    (those shards, the index's shards)."""
    if WEIGHTS_FILE in files:
        return [WEIGHTS_FILE], (1, 1)
    weight_map = _weight_map(repo_id, commit, files, access)
    names = embedding_tensors(weight_map, config, f"{repo_id}/{INDEX_FILE}")
    shards = sorted({weight_map[n] for n in names.values()})
    return [INDEX_FILE, *shards], (len(shards), len(set(weight_map.values())))


def _weight_map(repo_id: str, commit: str, files: set[str], access: Access) -> dict[str, str]:
    """The index's tensor name -> shard, every shard one of the repo's files."""
    weight_map = read_index(Path(_hf_download(repo_id, INDEX_FILE, commit, access)))
    strangers = sorted({str(s) for s in weight_map.values()} - files)
    if strangers:
        raise InputError(f"{repo_id}/{INDEX_FILE} names shards the repo does not have: {strangers}")
    return weight_map


def fetch_embeddings(repo_id, revision, commit, files, snapshot, config, access) -> Fetched:
    """Range-fetch the embedding tensors into snapshot/EMBEDDINGS_DIR, atomically, under the
    repo's lock; a cached entry found damaged is replaced."""
    target = snapshot / EMBEDDINGS_DIR
    source = _source(repo_id, revision, commit, True)
    problem = entry_damage(target, snapshot) if target.is_dir() else "missing"
    writable = os.access(snapshot.parent, os.W_OK)  # not in a cache mounted read-only
    if problem is None and not (writable and any(stale_temporaries(snapshot.parent))):
        return Fetched(target, source, 0, _weights_size(target), True)  # nothing to write
    if target.is_dir() and not writable:
        raise InputError(
            f"{repo_id}: the cached copy {target} is damaged ({problem}), and this process may "
            "not write there to repair it: run `npbert fetch` where it may, or choose a "
            "writable Hugging Face cache with HF_HOME, HF_HUB_CACHE or --cache-dir"
        )
    lock = snapshot.parents[2] / ".locks" / snapshot.parents[1].name / "npbert.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with repo_lock(lock, repo_id):
        for path in stale_temporaries(snapshot.parent):
            shutil.rmtree(path, ignore_errors=True)
        problem = None
        if target.exists() or target.is_symlink():  # cached before, or by another process
            problem = entry_damage(target, snapshot)
            if problem is None:
                return Fetched(target, source, 0, _weights_size(target), True)
            # which of two copies that disagree is whole, only the Hub says: the snapshot's
            # are downloaded again (in a cache of symlinks _hf_download has checked them)
            for name in disagreeing_copies(target, snapshot):
                remove_cached(snapshot / name)
                _hf_download(repo_id, name, commit, access)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        with building_directory(target) as building:
            fetched, full_size, shards = _write_embeddings(
                repo_id, commit, files, config, building, access
            )
            for name in SMALL_FILES:
                if (snapshot / name).is_file():
                    shutil.copyfile(snapshot / name, building / name)
    return Fetched(target, source, fetched, full_size, False, problem, shards)


def stale_temporaries(snapshots: Path) -> Iterable[Path]:
    """What interrupted fetches left in any snapshot of the repo, or what a fetch is building
    now: under the repo's lock, no fetch is, so every temporary found is stale."""
    return snapshots.glob(f"*/.{EMBEDDINGS_DIR}.*")  # building_directory's naming


@dataclass(frozen=True)
class RemoteFile:
    """A safetensors file on the Hub, as its header describes it."""

    url: str
    where: str  # repo/file at commit, for messages
    size: int  # bytes, from the Content-Range of the header's requests
    etag: str  # the ETag of the first, "" where the server sends none
    data_start: int  # 8 + the header's length
    tensors: dict[str, TensorHeader]


def _write_embeddings(repo_id, commit, files, config, directory: Path, access) -> tuple:
    """Fetch the embedding tensors' bytes and write them, as stored, to
    directory/model.safetensors. Returns (bytes of headers and tensors fetched, full size of
    the weights file(s) holding them, (those files, the weights files))."""
    from huggingface_hub.utils import tqdm

    names, weight_map, remotes = _locate_embeddings(repo_id, commit, files, config, access)
    plan = {  # file -> groups of ((begin, end), name), tensors side by side in one group
        shard: _coalesce(
            sorted(
                (remote.tensors[n].data_offsets, n)
                for n in names.values()
                if weight_map[n] == shard
            )
        )
        for shard, remote in remotes.items()
    }
    total = sum(g[-1][0][1] - g[0][0][0] for groups in plan.values() for g in groups)
    tensors = {}  # tensor name -> its bytes
    # disable=None: a bar on a terminal only, as huggingface_hub's downloads do
    with tqdm(total=total, unit="B", unit_scale=True, desc=WEIGHTS_FILE, disable=None) as bar:
        for shard, groups in plan.items():
            remote = remotes[shard]
            for group in groups:
                begin, end = group[0][0][0], group[-1][0][1]
                at = remote.data_start
                block = _get(remote, at + begin, at + end, access, bar)
                for (b, e), name in group:
                    tensors[name] = block[b - begin : e - begin]
    fetched = total + sum(remote.data_start for remote in remotes.values())
    full_size = sum(remote.size for remote in remotes.values())
    _serialize(tensors, remotes, weight_map, directory / WEIGHTS_FILE, repo_id, commit, full_size)
    return fetched, full_size, (len(remotes), len(set(weight_map.values())))


def _serialize(tensors, remotes, weight_map, path: Path, repo_id, commit, full_size) -> None:
    from safetensors import SafetensorError, TensorSpec, serialize_file

    specs = {}
    for name, data in tensors.items():  # `tensors` keeps the buffers alive while serializing
        info = remotes[weight_map[name]].tensors[name]
        specs[name] = TensorSpec(
            dtype=DTYPE_NAMES[info.dtype],
            shape=info.shape,
            data_ptr=data.ctypes.data,
            data_len=data.nbytes,
        )
    # One metadata entry, its JSON with sorted keys: safetensors writes the metadata from a
    # hash map, in an order that changes from run to run, and the same commit must give the
    # same file (npbert vectors records its sha256).
    record = {"repo": repo_id, "commit": commit, "files": list(remotes), "full_bytes": full_size}
    metadata = {"npbert": json.dumps(record, sort_keys=True)}
    try:
        serialize_file(specs, path, metadata=metadata)
    except SafetensorError as error:  # safetensors reports the OS's error (a full disk) in it
        raise cache_write_error(path, first_line(error)) from None


def _get(remote: RemoteFile, start: int, end: int, access: Access, bar=None) -> np.ndarray:
    """Bytes [start, end) of a remote file, which must not have changed meanwhile: its size
    and ETag are held to its first request's. (A URL at a commit names one file on the Hub;
    a mirror or proxy may still serve another version between two requests.)"""
    data, size, etag = get_range(
        remote.url, start, end, token=access.token, timeout=_download_timeout(), progress=bar
    )
    if size != remote.size:
        raise InputError(
            f"{remote.where}: {remote.size:,} bytes, then the server said {size:,}; nothing "
            "was cached, try again"
        )
    if etag and remote.etag and etag.removeprefix("W/") != remote.etag.removeprefix("W/"):
        raise InputError(
            f"{remote.where}: the server sent another version of the file between two "
            f"requests (ETag {remote.etag}, then {etag}); nothing was cached, try again"
        )
    return data


def _coalesce(ranges: list[tuple[tuple[int, int], str]]) -> list[list]:
    """Group sorted ((begin, end), name) ranges that lie within GAP bytes of each other,
    so tensors stored side by side come in one request."""
    groups: list[list] = []
    for item in ranges:
        if groups and item[0][0] - groups[-1][-1][0][1] <= GAP:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _locate_embeddings(repo_id, commit, files, config, access) -> tuple[dict, dict, dict]:
    """(field -> tensor name, tensor name -> file, file -> RemoteFile) for the files holding
    the embedding tensors, each header fetched and checked before any offset in it is used,
    and the tensors' shapes checked against config.json before any of their bytes is
    fetched (a header that disagrees would cost its whole download, or more memory than
    there is, before the checkpoint's check refused it)."""
    remotes = {}
    if WEIGHTS_FILE in files:
        remotes[WEIGHTS_FILE] = remote_header(repo_id, WEIGHTS_FILE, commit, access)
        weight_map = dict.fromkeys(remotes[WEIGHTS_FILE].tensors, WEIGHTS_FILE)
    else:
        weight_map = _weight_map(repo_id, commit, files, access)
    model_type, names = embedding_tensor_names(config, weight_map, repo_id)
    for shard in sorted({weight_map[n] for n in names.values()}):
        if shard not in remotes:
            remotes[shard] = remote_header(repo_id, shard, commit, access)
        held = [n for n in names.values() if weight_map[n] == shard]
        missing = [n for n in held if n not in remotes[shard].tensors]
        if missing:
            raise InputError(f"{repo_id}/{INDEX_FILE} puts {missing[0]} in {shard}, which lacks it")
        require_floats(remotes[shard].tensors, held, remotes[shard].where)
    stored = {}
    for field, name in names.items():
        remote = remotes[weight_map[name]]
        stored[field] = describe(Path(weight_map[name]), name, remote.data_start, remote.tensors)
    at = f"{repo_id} at {commit[:12]}"
    checked_config(config, model_type, stored, at, f"{repo_id}/config.json at {commit[:12]}")
    return names, weight_map, remotes


def remote_header(repo_id: str, filename: str, commit: str, access: Access) -> RemoteFile:
    """A weights file's header on the Hub, with two Range requests (its length, then the
    header), checked by npbert.loading.header as a local file is checked."""
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(repo_id, filename, revision=commit)
    where = f"{repo_id}/{filename} at {commit[:12]}"
    prefix, size, etag = get_range(url, 0, 8, token=access.token, timeout=_download_timeout())
    length = header_length(prefix.tobytes(), size, where)
    file = RemoteFile(url, where, size, etag, 8 + length, {})
    raw = _get(file, 8, 8 + length, access)
    return replace(file, tensors=parse_header(raw.tobytes(), size - 8 - length, where))


def _download_timeout() -> float:
    from huggingface_hub import constants

    return constants.HF_HUB_DOWNLOAD_TIMEOUT


@contextmanager
def quiet_library_logs():
    """Keep huggingface_hub's warnings (a line for each retry of a failed request) off the
    terminal: npbert reports a failure itself, in one line. HF_HUB_VERBOSITY shows them."""
    from huggingface_hub.utils import logging as hf_logging

    logger = hf_logging.get_logger()  # the library's root logger
    level = logger.level
    if "HF_HUB_VERBOSITY" not in os.environ:
        logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def hub_errors(repo_id: str, revision: str | None, access: Access):
    """huggingface_hub's, the network's and the disk's exceptions as one-line InputErrors."""
    from huggingface_hub import utils as hf

    at = named_at(repo_id, revision)
    try:
        yield
    except hf.HFValidationError as error:
        raise InputError(f"{repo_id!r} is not a valid Hub repo id: {first_line(error)}") from None
    except hf.LocalTokenNotFoundError:  # an OSError: before the disk's
        raise InputError(
            "token=True asks for the saved token, and none is saved: `hf auth login` saves "
            "one, or pass it as token=... or HF_TOKEN"
        ) from None
    except hf.GatedRepoError as error:
        if token_sent(error):
            raise InputError(
                f"{repo_id} is gated or private (401/403) and the token sent has no access to "
                "it: accept its terms on the Hub with that token's account, or use another"
            ) from None
        raise InputError(
            f"{repo_id} is gated or private (401/403): accept its terms on the Hub, then pass a "
            f"token with {PASS_A_TOKEN}"
        ) from None
    except hf.RepositoryNotFoundError as error:
        if token_refused(error):  # 0.x calls every 401 of the API "repository not found"
            raise answered(at, error) from None
        raise NotFound(
            f"{repo_id}: repository not found on {hub_address()} (if it is private, pass a "
            f"token with {PASS_A_TOKEN})"
        ) from None
    except hf.RevisionNotFoundError:
        raise InputError(f"{repo_id}: revision {revision or 'main'!r} not found") from None
    except hf.FileMetadataError as error:  # an OSError: before the disk's
        raise stripped_answer(error) from None
    except (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as error:  # before their
        # base class. huggingface_hub 0.x raises LocalEntryNotFoundError for any failed
        # request of a file not cached, an answer from the Hub included.
        if isinstance(error.__cause__, hf.HfHubHTTPError):
            raise answered(at, error.__cause__) from None
        if isinstance(error.__cause__, hf.FileMetadataError):
            raise stripped_answer(error.__cause__) from None
        if isinstance(error.__cause__, network_errors()) and requested_file(error.__cause__):
            raise failed_request(at, error.__cause__) from None
        raise Unreachable(f"cannot reach {hub_address()}", at) from None
    except hf.EntryNotFoundError as error:
        raise InputError(f"{at}: {missing_file(error)} not found") from None
    except hf.HfHubHTTPError as error:
        raise answered(at, error) from None
    except network_errors() as error:  # requests' errors are OSErrors: before the disk's
        raise failed_request(at, error) from None
    except OSError as error:
        wrong_size = WRONG_SIZE.match(str(error))
        if wrong_size:
            announced, got, name = wrong_size.groups()
            raise InputError(
                f"{at}: {name.rpartition('/')[2]} came {got} bytes long, not the {announced} the "
                "server announced; nothing was cached, try again"
            ) from None
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, *NOT_WRITABLE):
            raise
        where = error.filename or access.cache
        raise cache_write_error(where, error.strerror, error.errno) from None


def stripped_answer(error: Exception) -> InputError:
    """huggingface_hub's FileMetadataError: the answer for a file lacked the headers the Hub
    sends (its ETag, the commit), which a proxy between here and the Hub may remove."""
    return InputError(
        f"{hub_address()} answered without the headers a Hub sends ({first_line(error)}): "
        "is a proxy removing them, or HF_ENDPOINT not a Hub?"
    )


def missing_file(error) -> str:
    """The file an EntryNotFoundError was about, from its URL: the message's first line names
    none ("404 Client Error."), or that line where there is none."""
    url = str(getattr(getattr(error, "response", None), "url", None) or "")
    return file_in(url) or f"a file ({first_line(error)})"


def failed_request(at: str, error: Exception) -> InputError:
    """A request that got no answer or a broken one (after huggingface_hub's retries, where it
    makes them), naming the file it was for: the Hub had answered npbert's first request."""
    name = requested_file(error)
    what = "no answer" if timed_out(error) else "network error"
    where = f"for {name} from" if name else "talking to"
    return InputError(
        f"{at}: {what} {where} {hub_address()} ({first_line(error)}); nothing was cached, try again"
    )


def timed_out(error: Exception) -> bool:
    """Whether a network error is a timeout: each HTTP client names its timeouts so (httpx's
    ReadTimeout, requests' ConnectTimeout, urllib3's ReadTimeoutError)."""
    return "timeout" in type(error).__name__.lower()


def requested_file(error: Exception) -> str:
    """The repo file a network error's request was for, or "" (the request is unknown)."""
    try:
        url = str(error.request.url)  # httpx raises RuntimeError where no request is set
    except (AttributeError, RuntimeError):
        return ""
    return file_in(url)


def file_in(url: str) -> str:
    """The file of a Hub file URL (.../resolve/REVISION/FILE), or ""."""
    _, resolve, path = url.partition("/resolve/")
    return unquote(path.partition("/")[2]) if resolve else ""


# huggingface_hub's check of a small file's download against the size the server announced:
# a plain OSError (no errno, no class of its own) whose second line is advice for Python.
WRONG_SIZE = re.compile(
    r"Consistency check failed: file should be of size (\d+) but has size (\d+) \((.*)\)\."
)


NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only cache, or another's


def cache_write_error(path, reason: str, code: int | None = None) -> InputError:
    """The cache could not be written: full (the default), or not writable here (code)."""
    advice = "make room there, or choose another"
    if code in NOT_WRITABLE:
        advice = "this process may not write there: choose a writable"
    return InputError(
        f"cannot write {path} ({reason}): {advice} Hugging Face cache with HF_HOME, "
        "HF_HUB_CACHE or --cache-dir"
    )


# --token is npbert fetch's alone: the other commands read what it cached.
PASS_A_TOKEN = "HF_TOKEN=..., `hf auth login`, token= or `npbert fetch --token`"
# The Hub's X-Error-Message for a token it does not know (mistyped, revoked, expired).
TOKEN_REFUSED = "Invalid credentials in Authorization header"


def answered(at: str, error) -> InputError:
    """An error status from the Hub, with what to do where the status says."""
    status = getattr(error.response, "status_code", None)
    if token_refused(error):
        advice = f": the Hub does not know the token sent; check the one given by {PASS_A_TOKEN}"
    elif status == 403 and token_sent(error):
        advice = ": the token sent has no access to it (a fine-grained token may lack the repo)"
    elif status in (401, 403):
        advice = f": if the repo is private or gated, pass a token with {PASS_A_TOKEN}"
    elif status == 429:
        advice = ": rate limited; wait and try again (a token raises the limit)"
    else:
        advice = ""
    return InputError(f"{at}: the Hub answered {_answer(error)}{advice}")


def token_refused(error) -> bool:
    return error.response is not None and (
        error.response.headers.get("X-Error-Message") == TOKEN_REFUSED
    )


def token_sent(error) -> bool:
    """Whether the request the Hub refused carried a token."""
    try:
        return bool(error.response.request.headers.get("Authorization"))
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError where no request is set
        return False


def _answer(error) -> str:
    """An error status as '503 Service Unavailable for URL', whichever client got it."""
    response = error.response
    if response is None:
        return first_line(error)
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", "")
    return f"{response.status_code} {reason} for {response.url}"  # httpx's name, requests'
