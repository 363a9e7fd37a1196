"""The output directory of a corpus job: its index.json, its shards' files, and its lock.

    DIR/index.json       model, checkpoint digest, input, settings, shards, what of the input
                         they hold (texts, bytes, sha256), complete: true|false
    DIR/shard-NNNNN*.npy the shards (npbert.stream.shards)
    DIR/.npbert.lock     while a run writes the directory

One process, the job's, commits a shard: it renames its pending files into place and then
lists it in the index (rewritten atomically), so an interrupted run leaves only whole shards
that the index lists, and a resumed run continues from them.
"""

import dataclasses
import fcntl
import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from npbert.atomic import is_temporary, write_atomically
from npbert.embedder import Embedder, check_embedder
from npbert.errors import DamagedCorpus, InputError
from npbert.layer.inputs import check_path
from npbert.loading.config import JSON_ERRORS, json_problem
from npbert.stream.chunks import Chunk, Consumed
from npbert.stream.settings import COMPARED, CorpusSettings
from npbert.stream.shards import SHARD_FILES, pending_path, read_shard

INDEX = "index.json"
# An index.json of another version is refused by a resumed run, which cannot continue it.
FORMAT = "npbert corpus embeddings, version 4"
LOCK = ".npbert.lock"  # in the output directory while a run writes it

SUFFIXES = "|".join(map(re.escape, SHARD_FILES.values()))
PENDING = re.compile(rf"\.shard-\d{{5,}}({SUFFIXES})\.npy")
COMMITTED = re.compile(rf"shard-(\d{{5,}})({SUFFIXES})\.npy")


def index_header(embedder: Embedder, source: str | os.PathLike, settings: CorpusSettings) -> dict:
    """What the index says before its shards: its format, the model, the checkpoint's digest
    and width, the input, and the settings it records (CorpusSettings.indexed). Whether the
    checkpoint and the input are the same is told by the digest and the input's hash (file
    names, formats and bytes: Consumed), so a path spelled another way (./a.txt) still
    resumes, and a checkpoint changed in place does not."""
    check_embedder(embedder)
    weights = embedder.weights
    return {
        "format": FORMAT,
        "model": weights.source,
        "checkpoint": checkpoint_digest(embedder),
        "hidden_size": weights.config.output_size,
        "input": check_path("source", source),
        **settings.indexed(),
    }


def checkpoint_digest(embedder: Embedder) -> str:
    """A BLAKE2b digest of all that decides a text's embeddings: the config, the embedding
    tensors and the tokenizer."""
    weights = embedder.weights
    digest = hashlib.blake2b(repr(weights.config).encode(), digest_size=32)
    for field in dataclasses.fields(weights):
        array = getattr(weights, field.name)
        if isinstance(array, np.ndarray):
            digest.update(f"\0{field.name} {array.shape}\0".encode())
            digest.update(np.ascontiguousarray(array).data)
    digest.update(f"\0pad {embedder.tokenizer.pad_token_id}\0".encode())
    digest.update(embedder.tokenizer.tokenizer.to_str().encode())
    return digest.hexdigest()


@contextmanager
def writing(directory: Path):
    """Hold the output directory for one run: a second run on it (or a resumed one while the
    first still runs) would remove the first one's pending files, and both would fail. The
    lock file is removed at the end while still held; a run that opened it just before finds
    it gone (another inode at its name, or none) and is refused as if it were held. As the
    run alone writes there, it clears the temporaries killed writers leave at its start and
    end (remove_pending), not before each write."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        raise InputError(f"{{directory}} {directory}: another npbert run is writing it") from None
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def write_index(directory: Path, index: dict) -> None:
    text = (json.dumps(index, indent=1) + "\n").encode()
    write_atomically(directory / INDEX, lambda f: f.write(text), sweep=False)  # see writing()


def read_index(directory: Path, what: str) -> dict:
    """index.json, checked to be an npbert corpus index, else InputError."""
    path = directory / INDEX
    if not path.is_file():
        raise InputError(f"{what}: {directory} has no {INDEX}: it is not an npbert corpus")
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except JSON_ERRORS as error:
        raise InputError(f"{what}: {path} is not valid JSON ({json_problem(error)})") from None
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list) or not all(
        isinstance(s, dict) and isinstance(s.get("name"), str) for s in shards
    ):
        raise InputError(f"{what}: {path} is not an npbert corpus index (no list of shards)")
    for shard in shards:  # names come from the file: keep them inside the directory
        if Path(shard["name"]).name != shard["name"]:
            raise InputError(f"{what}: {path} names a shard outside it: {shard['name']!r}")
    return index


def check_index(index: dict, path: Path, what: str, advice: str, *, resuming: bool) -> None:
    """DamagedCorpus naming the first way the index disagrees with itself (index_problem), for
    `what` reads it, with `advice`: read as it is, texts would be missing or repeated, and a
    resumed run would go on from the wrong place. resuming: the input's hash and bytes too."""
    problem = index_problem(index, resuming)
    if problem:
        raise DamagedCorpus(f"{what}: {path} {problem}: {advice}", path=path, problem=problem)


def index_problem(index: dict, resuming: bool) -> str | None:
    """The first disagreement in the index, in words, or None: what of the input its shards
    hold said; every count a whole number; the shards named by their places (shard-00000
    first), each starting where the one before ended; the totals, and the texts of the input
    consumed, their sums."""
    consumed = index.get("consumed")
    if not isinstance(consumed, dict) or (resuming and not isinstance(consumed.get("sha256"), str)):
        return "does not say what input it holds"
    counts = {"texts": index.get("texts"), "tokens": index.get("tokens")}
    counts["consumed texts"] = consumed.get("texts")
    if resuming:
        counts["consumed bytes"] = consumed.get("bytes")
    for shard in index["shards"]:
        name = shard["name"]
        counts |= {f"{name}'s {key}": shard.get(key) for key in ("first", "texts", "tokens")}
    for name, count in counts.items():
        if type(count) is not int or count < 0:
            return f"has a count that is not a whole number, 0 or more (its {name}: {count!r})"
    return shards_problem(index["shards"]) or totals_problem(index)


def shards_problem(shards: list[dict]) -> str | None:
    """Where the shards' list has a gap or a repeat, in words, or None."""
    end = 0
    for place, shard in enumerate(shards):
        if shard["name"] != (expected := f"shard-{place:05d}"):
            return (
                f"lists {shard['name']} in the place of {expected}: a shard is missing from "
                "the list, or listed twice"
            )
        if shard["first"] != end:
            return (
                f"lists {expected} from text {shard['first']:,}, where the shards before it "
                f"end at text {end:,}: its counts disagree"
            )
        end += shard["texts"]
    return None


def totals_problem(index: dict) -> str | None:
    """Where the index's totals are not its shards' sums, in words, or None."""
    shards = index["shards"]
    texts, tokens = (sum(shard[key] for shard in shards) for key in ("texts", "tokens"))
    if index["texts"] != texts or index["tokens"] != tokens:
        return (
            f"says {index['texts']:,} texts and {index['tokens']:,} tokens, and its shards hold "
            f"{texts:,} and {tokens:,}: its counts disagree"
        )
    if index["consumed"]["texts"] != texts:
        return (
            f"says {index['consumed']['texts']:,} texts of the input were consumed, and its "
            f"shards hold {texts:,}: its counts disagree"
        )
    return None


def check_out(directory: Path, resume: bool) -> None:
    """InputError unless `directory` is absent, empty, or when resuming an npbert corpus. A
    run's own leftovers (its lock, pending files, the index of a run that committed no shard)
    count as nothing: a run that failed before its first shard must not trap the retry its
    error asked for, with other settings or without {resume=True}."""
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{{directory}} {directory} is a file, not a directory")
    if directory.is_symlink() and not directory.exists():  # mkdir would say "File exists"
        raise InputError(
            f"{{directory}} {directory} is a symbolic link to {os.readlink(directory)}, which "
            "does not exist: create that directory, or give another"
        )
    present = held_files(directory)
    if present and not resume:
        held = (directory / LOCK).exists()  # a run is writing it, or was killed
        running = " (once it has ended, if it is still running)" if held else ""
        raise InputError(
            f"{{directory}} {directory} exists and is not empty: pass {{resume=True}} to continue "
            f"the run that wrote it{running}, or give a new directory"
        )
    if resume and not (directory / INDEX).exists() and present:
        raise InputError(
            f"{{resume=True}}: {directory} has no {INDEX} but holds other files ({present[0]}"
            f"{', ...' if len(present) > 1 else ''}): "
            "it is not an npbert corpus to continue"
        )


def held_files(directory: Path) -> list[str]:
    """The names of what `directory` holds but a run's leftovers: its lock, pending files and
    temporaries, and an index that lists no shard (is_unstarted) with the shards it does not
    list (committed in the second before a kill -9 or a full disk, the index not yet
    rewritten: the next run removes them, remove_unlisted)."""
    if not directory.exists():
        return []
    present = sorted(p.name for p in directory.iterdir() if p.name != LOCK and not is_pending(p))
    if INDEX in present and is_unstarted(directory):
        return [name for name in present if name != INDEX and not COMMITTED.fullmatch(name)]
    return present


def is_unstarted(directory: Path) -> bool:
    """Whether the directory's index is of a run that committed no shard and did not complete:
    it holds nothing of the input (written at a run's start, left by a kill before the first
    shard)."""
    try:
        index = json.loads((directory / INDEX).read_text(encoding="utf-8"))
    except (OSError, *JSON_ERRORS):
        return False
    return (
        isinstance(index, dict)
        and str(index.get("format")).startswith("npbert corpus embeddings")
        and (index.get("shards"), index.get("texts"), index.get("complete")) == ([], 0, False)
        and isinstance(index.get("consumed"), dict)
        and index["consumed"].get("texts") == 0
    )


def start_index(directory: Path, header: dict, resume: bool) -> dict:
    """A new index, or when resuming the existing one after checking it is the same job. The
    shards it does not list are removed by the run once the input agrees (remove_unlisted)."""
    check_out(directory, resume)  # again, now that no other run writes it
    if not (directory / INDEX).exists() or is_unstarted(directory):  # see check_out
        index = {**header, "shards": [], "texts": 0, "tokens": 0, "complete": False}
        index["consumed"] = Consumed().state()  # nothing yet
        write_index(directory, index)
    else:
        index = read_index(directory, "{resume=True}")
        check_resumed(directory, index, header)
    remove_pending(directory)
    return index


def check_resumed(directory: Path, index: dict, header: dict) -> None:
    """InputError unless the index is of this job, agrees with itself, and its shards are
    whole: a damaged index would resume at the wrong place."""
    check_same_job(directory, index, header)
    check_index(index, directory / INDEX, "{resume=True}", "give a new directory", resuming=True)
    for shard in index["shards"]:
        for suffix in SHARD_FILES.values():
            if not (directory / f"{shard['name']}{suffix}.npy").is_file():
                raise InputError(
                    f"{{resume=True}}: {directory} has lost {shard['name']}{suffix}.npy, which its "
                    f"{INDEX} lists: give a new directory"
                )
        read_shard(directory, shard, index, "{resume=True}")


def check_same_job(directory: Path, index: dict, header: dict) -> None:
    """InputError unless the index is of this format, checkpoint and compared settings."""
    compared = ("format", "checkpoint", "hidden_size", *COMPARED)
    changed = [key for key in compared if index.get(key) != header[key]]
    if "format" in changed:
        held = "an index of no format" if index.get("format") is None else repr(index["format"])
        raise InputError(
            f"{{resume=True}}: {directory} holds {held}, which this npbert cannot continue "
            f"({FORMAT!r}): give a new directory"
        )
    if changed:
        raise InputError(
            f"{{resume=True}}: {directory} was written with other settings ({', '.join(changed)}); "
            "give a new directory"
        )


def remove_unlisted(directory: Path, listed: int) -> None:
    """Shard files numbered past the index's `listed` shards: committed in the second before
    the run was killed (the index is written once a second), and embedded again as the run
    goes on, or else left behind, where the input now ends sooner."""
    for path in directory.iterdir():
        found = COMMITTED.fullmatch(path.name)
        if found and int(found[1]) >= listed:
            path.unlink(missing_ok=True)


def is_pending(path: Path) -> bool:
    """A shard's file written but not committed (hidden), or a temporary of npbert's."""
    return PENDING.fullmatch(path.name) is not None or is_temporary(path)


def remove_pending(directory: Path) -> None:
    """Files of shards that were written but not committed, and temporaries of an
    interrupted write: npbert's own names only, whatever else the directory holds."""
    for path in directory.iterdir():
        if is_pending(path):
            path.unlink(missing_ok=True)


def commit_shard(
    directory: Path, index: dict, name: str, chunk: Chunk, tokens: int, *, write: bool
) -> None:
    """Rename the shard's files into place, then list it in the index (written if `write`):
    the index never names a shard that is not whole."""
    for suffix in SHARD_FILES.values():
        os.replace(pending_path(directory, name, suffix), directory / f"{name}{suffix}.npy")
    index["shards"].append(
        {"name": name, "first": index["texts"], "texts": chunk.texts, "tokens": tokens}
    )
    index["texts"] += chunk.texts
    index["tokens"] += tokens
    index["consumed"] = chunk.consumed
    index["complete"] = False
    if write:
        write_index(directory, index)
