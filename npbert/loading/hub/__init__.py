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
headers and token (token=, HF_TOKEN or `hf auth login`); npbert checks each weights file's
header itself (npbert.loading.header) and every range it gets (.ranges). The entry is built
under a temporary name and renamed into place under the repo's lock, so an interrupted fetch
never leaves anything that loads and two processes can fetch at once.

A cached model loads with no network call, a branch or tag through the Hub cache's refs; a
fetch asks the Hub again, and builds a damaged entry again. With full=True the whole weights
file is downloaded with hf_hub_download instead. Modules: .access (arguments, environment,
timeouts), .errors (exceptions as one line), .cache (what is cached, the lock), .files
(huggingface_hub's downloads), .ranges (HTTP Range requests), .embeddings (the tensors).
"""

import os
import shutil
from dataclasses import replace
from pathlib import Path

from npbert.atomic import building_directory
from npbert.errors import InputError, warn
from npbert.layer.inputs import check_flag, check_path
from npbert.loading.checkpoint import INDEX_FILE, WEIGHTS_FILE, locate_checkpoint, no_safetensors
from npbert.loading.config import read_config
from npbert.loading.hub.access import (
    Access,
    check_hub_variables,
    check_not_url,
    check_revision,
    named_at,
)
from npbert.loading.hub.cache import (
    EMBEDDINGS_DIR,
    SMALL_FILES,
    Fetched,
    damage_of_file,
    damaged,
    disagreeing_copies,
    embedding_tensors,
    entry_damage,
    from_cache,
    repo_lock,
    source,
    weights_size,
)
from npbert.loading.hub.embeddings import write_embeddings
from npbert.loading.hub.errors import NotFound, Unreachable, hub_errors, quiet_library_logs
from npbert.loading.hub.files import hf_download, model_info, weight_map
from npbert.loading.hub.ranges import RangeIgnored

__all__ = [
    "Access",
    "Fetched",
    "NotFound",
    "Unreachable",
    "check_hub_variables",
    "fetch",
    "resolve",
]


def resolve(
    model: str | os.PathLike,
    *,
    revision: str | None = None,
    full: bool = False,
    token: str | bool | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
) -> tuple[Path, dict]:
    """(directory holding config.json, tokenizer and weights, source metadata) of a local
    checkpoint directory, or of a Hub repo id from the cache, else fetched."""
    full = check_flag("full", full)
    local_files_only = check_flag("local_files_only", local_files_only)
    Access(token, cache_dir, local_files_only)  # checks them, for a directory too
    directory = local_directory(model, revision, full)
    if directory is not None:
        return directory, {"model": str(directory.resolve())}
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


def local_directory(model, revision: str | None, full: bool) -> Path | None:
    """The checkpoint directory `model` names, or None for what may be a Hub repo id;
    InputError or NotFound for a name that is neither."""
    model = check_path("model", model)
    if not model:  # Path("") is the current directory
        raise InputError("the model is empty: give a checkpoint directory or a Hub repo id")
    path = Path(model).expanduser()
    if path.is_dir():
        for argument, given in (("{revision}", revision is not None), ("{full=True}", full)):
            if given:
                raise InputError(f"{argument} applies to Hub repo ids, and {model} is a directory")
        return path
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
    return None


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
    damaged entry of npbert's is built again). local_files_only: from the cache, or an error."""
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
                raise not_cached(repo_id, revision, full, access)
            return download(repo_id, revision, full, access)
    except Unreachable as error:  # from any request, as hub_errors names it
        raise unreachable(error, repo_id, revision, full, access) from None


def not_cached(repo_id: str, revision: str | None, full: bool, access: Access) -> NotFound:
    """What is missing from the cache, where the Hub is not to be asked."""
    at = named_at(repo_id, revision)
    if full and cut_cached(repo_id, revision, access):
        at = f"the whole weights file of {at} (only its embedding tensors are cached)"
    return NotFound(
        f"{at} is not in the cache {access.cache} and the Hub is not to be asked "
        "(HF_HUB_OFFLINE or {local_files_only=True}): allow it once to fetch it"
    )


def cut_cached(repo_id: str, revision: str | None, access: Access) -> bool:
    """Whether npbert's cut of the weights is cached, damaged or not."""
    try:
        return from_cache(repo_id, revision, False, access) is not None
    except InputError:  # damaged: cached all the same
        return True


def unreachable(error: Unreachable, repo_id, revision, full: bool, access: Access) -> InputError:
    """The error of a fetch that could not reach the Hub: `error`, or where a copy is cached
    (a fetch asks the Hub for a newer commit first), that the copy still loads."""
    try:
        cached = from_cache(repo_id, revision, full, access)
    except InputError as damage:  # the fetch that would replace it is what failed
        return InputError(f"{error.reach}, and {damage.message}")
    if cached is None:
        return error
    return InputError(
        f"{error.reach}, to check {named_at(repo_id, revision)} for a newer commit; the copy "
        f"cached at {cached.source['commit'][:12]} still loads (a load does not ask the Hub)"
    )


def download(repo_id: str, revision: str | None, full: bool, access: Access) -> Fetched:
    """Fetch from the Hub: small files whole, then the weights (ranges, or whole with full)."""
    info = model_info(repo_id, revision, access)
    # config.json by the revision asked for: this records the branch or tag in the Hub
    # cache's refs, so later loads find it with no request.
    snapshot = hf_download(repo_id, "config.json", revision, access).parent
    commit = snapshot.name
    if commit != info.sha:  # the branch moved between the two requests
        info = model_info(repo_id, commit, access)
    files = {s.rfilename for s in info.siblings or []}
    if WEIGHTS_FILE not in files and INDEX_FILE not in files:
        raise no_safetensors(f"{repo_id} at {commit[:12]}", sorted(files))
    for name in SMALL_FILES[1:]:  # the tokenizer files there are
        if name in files:
            hf_download(repo_id, name, commit, access)
    fetched = None if full else whole_cached(repo_id, revision, snapshot, access)
    if fetched is None and not full:
        try:
            fetched = fetch_embeddings(repo_id, revision, commit, files, snapshot, access)
        except RangeIgnored as answer:
            warn(
                f"the server did not answer the Range request for {repo_id} with the part asked "
                f"(it answered {answer}); downloading the whole weights file instead"
            )
    if fetched is None:
        fetched = download_whole(repo_id, revision, commit, files, snapshot, access)
    locate_checkpoint(fetched.directory)  # config.json against the tensors, as a load checks
    return fetched


def whole_cached(repo_id, revision: str | None, snapshot: Path, access: Access) -> Fetched | None:
    """The whole weights of the commit, as Fetched, where a fetch with full cached them whole
    and sound and npbert has cut no entry of its own: they load as they are, and
    range-fetching their embedding tensors again would download them twice. None otherwise."""
    entry, commit = snapshot / EMBEDDINGS_DIR, snapshot.name
    if entry.exists() or entry.is_symlink():
        return None
    try:
        found = from_cache(repo_id, commit, True, access)
    except InputError:  # damaged: fetch_embeddings cuts an entry of its own instead
        return None
    if found is None:
        return None
    return replace(found, source=source(repo_id, revision, commit, False))


def download_whole(repo_id, revision, commit, files, snapshot, access) -> Fetched:
    """The whole weights file (or the index and the shards holding the embeddings) with
    hf_hub_download, each checked: a cached copy found damaged is said (huggingface_hub
    returns a commit's cached file as it is), one served damaged is not kept."""
    names, shards = weights_to_fetch(repo_id, commit, files, read_config(snapshot), access)
    for name in names[1:] if names[0] == INDEX_FILE else names:  # weights_to_fetch took it
        path = snapshot / name
        problem = damage_of_file(path) if path.is_file() else None
        if problem is not None:
            raise damaged(repo_id, revision, commit, problem, access, ours=False)
        hf_download(repo_id, name, commit, access, small=False)
        served = damage_of_file(path, f"{repo_id}/{name} at {commit[:12]}")
        if served is not None:  # not kept: the next load would call the cache damaged
            path.resolve().unlink()  # the blob, then the snapshot's link to it
            path.unlink(missing_ok=True)
            raise InputError(f"{served} (as the Hub serves it; not kept in the cache)")
    size = sum((snapshot / name).stat().st_size for name in names)
    found = source(repo_id, revision, commit, False)
    return Fetched(snapshot, found, size, size, False, None, shards)


def weights_to_fetch(repo_id, commit, files, config, access) -> tuple[list[str], tuple]:
    """The single weights file, or the index and only the shards holding the embeddings; and
    (those shards, the index's shards)."""
    if WEIGHTS_FILE in files:
        return [WEIGHTS_FILE], (1, 1)
    mapped = weight_map(repo_id, commit, files, access)
    names = embedding_tensors(mapped, config, f"{repo_id}/{INDEX_FILE}")
    shards = sorted({mapped[n] for n in names.values()})
    return [INDEX_FILE, *shards], (len(shards), len(set(mapped.values())))


def fetch_embeddings(repo_id, revision, commit, files, snapshot, access) -> Fetched:
    """Range-fetch the embedding tensors into snapshot/EMBEDDINGS_DIR, built under a temporary
    name and renamed into place under the repo's lock. A damaged entry is built again, unless
    its copies of the small files and the snapshot's disagree: which is whole, deleting the
    revision and downloading it again settles."""
    target = snapshot / EMBEDDINGS_DIR
    found = source(repo_id, revision, commit, True)
    # an intact entry is used without a write, not even the lock's: a read-only cache serves it
    if target.exists() and entry_damage(target, snapshot, repo_id) is None:
        return Fetched(target, found, 0, weights_size(target), True)
    with repo_lock(snapshot, repo_id):
        problem = None
        if target.exists() or target.is_symlink():  # damaged, or built by another meanwhile
            problem = entry_damage(target, snapshot, repo_id)
            if problem is None:
                return Fetched(target, found, 0, weights_size(target), True)
            if disagreeing_copies(target, snapshot):
                raise damaged(repo_id, revision, commit, problem, access, ours=False)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        config = read_config(snapshot)
        with building_directory(target) as building:
            fetched, full_size, shards = write_embeddings(
                repo_id, commit, files, config, building, access
            )
            for name in SMALL_FILES:
                if (snapshot / name).is_file():
                    shutil.copyfile(snapshot / name, building / name)
    return Fetched(target, found, fetched, full_size, False, problem, shards)
