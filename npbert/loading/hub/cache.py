"""What npbert finds in the Hub cache with no network call, and the repo's lock.

A snapshot holds huggingface_hub's downloads, and npbert's own entry, EMBEDDINGS_DIR: the
embedding tensors and copies of the small files, renamed into place whole. A damaged entry is
npbert's to refuse, and a fetch builds it again; damage to huggingface_hub's own files is said,
with what to do, and left to huggingface_hub's cache tools. Only headers and sizes are read, so
that loading stays cheap.
"""

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from npbert.errors import InputError
from npbert.loading.checkpoint import INDEX_FILE, WEIGHTS_FILE, embedding_tensor_names, read_index
from npbert.loading.config import JSON_ERRORS, read_config
from npbert.loading.header import read_file_header
from npbert.loading.hub.access import Access, named_at, notice_after

EMBEDDINGS_DIR = "npbert-embeddings"  # in a snapshot; no Hub repo is expected to have one
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
LOCK_NOTICE = 3  # seconds the repo's lock may be held by another process before it is said


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


def source(repo_id: str, revision: str | None, commit: str, partial: bool) -> dict:
    """The source metadata of a Hub checkpoint, as recorded with every result."""
    return {
        "model": repo_id,
        "revision": revision or "main",
        "commit": commit,
        "weights": "embedding tensors only" if partial else "full file",
    }


def from_cache(repo_id: str, revision: str | None, full: bool, access: Access) -> Fetched | None:
    """A cached checkpoint, found with no network call, or None; InputError if it is damaged."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(
        repo_id, "config.json", cache_dir=access.cache_dir, revision=revision
    )
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    entry = snapshot / EMBEDDINGS_DIR
    if not full and (entry.exists() or entry.is_symlink()):
        problem = entry_damage(entry, snapshot, repo_id)
        if problem is not None:
            raise damaged(repo_id, revision, snapshot.name, problem, access, ours=True)
        return Fetched(
            entry, source(repo_id, revision, snapshot.name, True), 0, weights_size(entry), True
        )
    if (snapshot / WEIGHTS_FILE).is_file() or holds_shards(snapshot):
        problem = damage(snapshot)
        if problem is not None:
            raise damaged(repo_id, revision, snapshot.name, problem, access, ours=False)
        found = source(repo_id, revision, snapshot.name, False)
        return Fetched(snapshot, found, 0, weights_size(snapshot), True)
    return None


def damaged(repo_id, revision, commit: str, problem: str, access: Access, ours: bool):
    """The error of a damaged cached copy, with what to do: fetch npbert's own entry again
    (a fetch replaces it); delete the revision where huggingface_hub's files are in question,
    which a fetch takes as cached."""
    if ours:
        advice = f"fetch {named_at(repo_id, revision)} again to replace it"
    else:
        advice = f"delete the revision with `hf cache rm {commit}`, then fetch it again"
    if access.cache_dir is not None:
        advice += " (with the same {cache_dir})"
    return InputError(f"the cached {repo_id} at {commit[:12]} is damaged ({problem}): {advice}")


def holds_shards(snapshot: Path) -> bool:
    """Whether a cached index comes with the shards holding the embedding tensors. A fetch
    that failed after downloading the index (an index that names a shard the repo lacks,
    or puts a tensor in a shard without it) leaves the index alone: that is not a cached
    checkpoint, and asking the Hub again reports what is wrong with the repo."""
    if not (snapshot / INDEX_FILE).is_file():
        return False
    try:
        weight_map = read_index(snapshot / INDEX_FILE)
    except InputError:  # not an index at all: the Hub is asked again, and the error named
        return False
    try:
        names = embedding_tensors(weight_map, read_config(snapshot), INDEX_FILE).values()
        return all((snapshot / weight_map[name]).is_file() for name in names)
    except (ValueError, KeyError, TypeError):  # damage() says what is wrong
        return True


def entry_damage(entry: Path, snapshot: Path, repo_id: str) -> str | None:
    """What is wrong with an npbert-embeddings entry, or None. An entry is renamed into place
    whole, with its weights file and a copy of every small file of the snapshot's, so a file
    missing or of another size was removed or changed since (by hand, by a cleaning tool)."""
    if not entry.is_dir():
        return f"{entry} is not a directory"
    copies = [name for name in SMALL_FILES if (snapshot / name).is_file()]
    missing = [name for name in (WEIGHTS_FILE, *copies) if not (entry / name).is_file()]
    if missing:
        return f"{entry} lacks {', '.join(missing)}"
    for name in disagreeing_copies(entry, snapshot):
        size, copied = (snapshot / name).stat().st_size, (entry / name).stat().st_size
        return (
            f"{entry / name} and the snapshot's {name} differ in size ({copied:,} and "
            f"{size:,} bytes)"
        )
    problem = damage(entry)
    if problem is not None:
        return problem
    # another repo's or commit's entry, copied in (by hand, a sync tool): its record says so;
    # a record without them names nothing to compare
    record = npbert_record(entry / WEIGHTS_FILE)
    held = (record.get("repo", repo_id), record.get("commit", snapshot.name))
    if held != (repo_id, snapshot.name):
        return f"{entry} holds {held[0]} at {held[1]}"
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
    """What is wrong with a cached checkpoint's weights (truncated, overwritten), or None: the
    single file, or the shards holding the embeddings. Another shard (which transformers,
    sharing the cache, may have left damaged) is not npbert's to judge."""
    if (directory / WEIGHTS_FILE).is_file():
        return damage_of_file(directory / WEIGHTS_FILE)
    try:
        weight_map = read_index(directory / INDEX_FILE)
    except InputError as error:  # as holds_shards reads it
        return error.message
    try:
        names = embedding_tensors(weight_map, read_config(directory), INDEX_FILE).values()
        shards = sorted({weight_map[name] for name in names})
    except InputError:  # the config's problem, named when it loads: every shard for now
        shards = sorted(set(weight_map.values()))
    for shard in shards:
        problem = damage_of_file(directory / shard) if (directory / shard).is_file() else None
        if problem is not None:
            return problem
    return None


def damage_of_file(path: Path, where: str = "") -> str | None:
    """What is wrong with a safetensors file's header or size, or None."""
    try:
        read_file_header(path, where)
    except InputError as error:
        return error.message
    return None


def embedding_tensors(names: Iterable[str], config: dict, where: str) -> dict[str, str]:
    """EmbeddingWeights field -> name of each tensor npbert reads, among a checkpoint's tensor
    names; config is the repo's parsed config.json, whose model_type picks the family."""
    return embedding_tensor_names(config, names, where)[1]


def npbert_record(path: Path) -> dict:
    """The record an embedding-only file keeps in its metadata (repo, commit, files,
    full_bytes), or {} where the file has none (one npbert did not cut) or another."""
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        recorded = (f.metadata() or {}).get("npbert", "{}")
    try:
        record = json.loads(recorded)
    except JSON_ERRORS:
        return {}
    return record if isinstance(record, dict) else {}


def weights_size(directory: Path) -> int:
    """Size on the Hub of the weights an embedding-only file was cut from (or of the files)."""
    single = directory / WEIGHTS_FILE
    if single.is_file():
        full = npbert_record(single).get("full_bytes")
        size = single.stat().st_size
        # a record npbert wrote, or a file npbert did not cut (its own record, or none): its size
        return full if type(full) is int and full >= size else size
    shards = set(read_index(directory / INDEX_FILE).values())  # checked by damage() before
    return sum((directory / s).stat().st_size for s in shards if (directory / s).is_file())


@contextmanager
def repo_lock(snapshot: Path, repo_id: str) -> Iterator[None]:
    """The repo's npbert.lock, beside huggingface_hub's locks, held for the block; a wait for
    another process that holds it (fetching the same repo, or stopped with Ctrl-Z) is said
    after LOCK_NOTICE seconds. The kernel drops the lock however the holder ends."""
    path = snapshot.parents[2] / ".locks" / snapshot.parents[1].name / "npbert.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    message = (
        f"waiting for another process fetching {repo_id}, which holds the lock {path} "
        "(Ctrl-C stops)"
    )
    try:
        with notice_after(LOCK_NOTICE, message):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
