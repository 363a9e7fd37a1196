"""Embedding a corpus larger than memory: `npbert embed --input FILE|DIR --out DIR`.

The input (npbert.stream.sources: .txt, .jsonl, Parquet, a directory of them, or `-` for standard
input) is cut into chunks of about `shard_bytes` bytes, and each chunk becomes one shard,
its texts embedded back to back without padding (npbert.layer.ragged), in input order:

    DIR/index.json                    model, checkpoint digest, input, settings, shards, what
                                      of the input they hold (texts, bytes, sha256),
                                      complete: true|false
    DIR/shard-00000.npy               (tokens, E) float32 (or float16), the texts' rows
    DIR/shard-00000.lengths.npy       (texts,) int64, tokens per text, in input order
    DIR/shard-00000.input_ids.npy     (tokens,) int64
    DIR/shard-00000.token_type_ids.npy

An engine embeds the chunks and writes each shard's files under hidden names: here worker
processes (one per core, each single-threaded), or Ray actors (npbert.ray). This process
alone commits a shard: it renames the files into place in input order and then rewrites
index.json (atomically), so an interrupted run leaves only whole shards that the index
lists. `--resume` checks that the input still begins with what the shards hold and goes on
from there.
"""

import dataclasses
import fcntl
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

import numpy as np

from npbert.atomic import is_temporary, write_atomically
from npbert.embedder import Embedder, check_embedder, check_encodings
from npbert.errors import InputError, WorkerLost
from npbert.layer import tables
from npbert.layer.cores import cpus
from npbert.layer.inputs import check_count, check_flag, check_path, shown
from npbert.layer.ragged import embed_encodings
from npbert.loading.config import JSON_ERRORS, json_problem
from npbert.loading.npyfile import check_header, load_npy, regular_file
from npbert.stream.progress import Progress, check_mode
from npbert.stream.sources import (
    Chunk,
    Consumed,
    chunks,
    input_files,
    read_chunk,
    size_before,
    total_size,
)

INDEX = "index.json"
# An index.json of another version is refused by --resume, which cannot continue it.
FORMAT = "npbert corpus embeddings, version 4"
# Settings kept for the record, not compared by --resume. Whether the checkpoint and the input
# are the same is told by the checkpoint's digest and the input's hash (file names, the formats
# they are read in, and bytes: Consumed), so a path spelled another way (./a.txt) still resumes,
# a checkpoint changed in place does not, and --input-format txt on a .txt file continues a run
# that did not give it.
RECORDED = ("model", "input", "input_format")
SHARD_FILES = {  # array -> file name suffix
    "embeddings": "",
    "lengths": ".lengths",
    "input_ids": ".input_ids",
    "token_type_ids": ".token_type_ids",
}
DTYPES = ("float32", "float16")

# An engine takes the directory and (shard name, chunk) pairs and yields, in the same order,
# (name, chunk, tokens) once the shard's files are written under their pending names.
Engine = Callable[[Path, Iterator[tuple[str, Chunk]]], Iterator[tuple[str, Chunk, int]]]


def check_settings(dtype, truncation) -> bool:
    """A corpus job's output dtype and truncation flag, on either engine, or InputError;
    returns the flag as a bool (JSON has no NumPy bool)."""
    if not isinstance(dtype, str) or dtype not in DTYPES:  # np.dtype("float16") == "float16"
        names = " or ".join(map(repr, DTYPES))
        raise InputError(f"dtype must be the name {names}, got {shown(dtype)}")
    return check_flag("truncation", truncation)


def corpus_settings(embedder, source, input_format, shard_bytes, truncation, dtype) -> dict:
    """What must be the same for --resume to continue a run (but the RECORDED ones)."""
    check_embedder(embedder)
    truncation = check_settings(dtype, truncation)
    shard_bytes = check_count("shard_bytes", shard_bytes)
    weights = embedder.weights
    return {
        "format": FORMAT,
        "model": weights.source,
        "checkpoint": checkpoint_digest(embedder),
        "hidden_size": weights.config.output_size,
        "input": check_path("source", source),
        "input_format": input_format,
        "shard_bytes": shard_bytes,
        "truncation": truncation,
        "dtype": dtype,
    }


def embed_corpus(
    embedder: Embedder,
    source: str | os.PathLike,
    directory: str | os.PathLike,
    *,
    input_format: str | None = None,
    shard_bytes: int = 1 << 16,
    truncation: bool = False,
    resume: bool = False,
    dtype: str = "float32",
    workers: int | None = None,
    progress: str | None = None,
) -> dict:
    """Embed every text of `source` into shards under `directory` on `workers` processes
    (default: one per core); returns the index. progress: "bar", "lines" or None."""
    settings = corpus_settings(embedder, source, input_format, shard_bytes, truncation, dtype)
    engine = LocalEngine(embedder, workers=workers, truncation=truncation, dtype=dtype)
    return run_job(settings, directory, engine, resume=resume, progress=progress)


def checkpoint_digest(embedder: Embedder) -> str:
    """A BLAKE2b digest of all that decides a text's embeddings: the config, the embedding
    tensors and the tokenizer. (0.1 s for all-MiniLM-L6-v2's 47 MB.)"""
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


def run_job(settings: dict, directory, engine: Engine, *, resume: bool, progress) -> dict:
    """The corpus job for any engine: chunks after what the index holds, shards committed in
    input order, the index rewritten at most every INDEX_EVERY seconds, at the end and when
    stopped."""
    resume = check_flag("resume", resume)
    check_mode(progress)
    if not check_path("directory", directory):  # Path("") is the current directory
        raise InputError("the output directory is empty: give a directory for the shards")
    directory = Path(directory)
    files = input_files(settings["input"], settings["input_format"])
    check_out(directory, resume)  # before writing() leaves its lock in a directory not ours
    with writing(directory):
        index = start_index(directory, settings, resume)
        done = index.get("consumed")
        pieces, start = chunks(files, settings["shard_bytes"], done), done["bytes"] if done else 0
        if start and total_size(files) is not None:  # resumed: the bar starts at the next
            following = next(pieces, None)  # chunk (the bytes the shards' texts were hashed as
            start = size_before(files, following)  # are a Parquet file's rows' JSON)
            pieces = itertools.chain([] if following is None else [following], pieces)
        bar = Progress(progress, total_size(files), start)
        first = len(index["shards"])
        named = ((f"shard-{n:05d}", chunk) for n, chunk in enumerate(pieces, first))
        written = time.monotonic()
        try:
            with closing(engine(directory, named)) as embedded:  # closed: no worker writing
                for name, chunk, tokens in embedded:
                    due = time.monotonic() - written >= INDEX_EVERY
                    with stops_held():  # a stop between its steps: an index --resume refuses
                        commit_shard(directory, index, name, chunk, tokens, write=due)
                    written = time.monotonic() if due else written
                    bar.update(chunk.size, tokens)
            index["complete"] = True
        finally:
            bar.close()
            remove_pending(directory)
            write_index(directory, index)  # the shards committed, on an interruption too
    return index


# Seconds between two writes of the index during a run. Each write is of the whole index, so
# writing it after every shard made a run quadratic in its shards (20,000 texts in 2,184
# shards: 55 s, most of it writing the index); after a run killed with SIGKILL, --resume
# removes the shards of its last second, which the index does not list, and embeds them again.
INDEX_EVERY = 1.0


LOCK = ".npbert.lock"  # in the output directory while a run writes it


@contextmanager
def writing(directory: Path):
    """Hold the output directory for one run: a second run on it (or a --resume while the
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


# --- the directory and its index -----------------------------------------------------------


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


def check_counts(index: dict, path: Path) -> None:
    """The counts --resume goes on from, as commit_shard keeps them: check_totals, and as
    many texts consumed as the shards hold. Else InputError: a damaged index would resume at
    the wrong place."""
    consumed = index.get("consumed")
    if not isinstance(consumed, dict) or not isinstance(consumed.get("sha256"), str):
        raise InputError(f"{{resume=True}}: {path} does not say what input it holds")
    more = (consumed.get("texts"), consumed.get("bytes"))
    check_totals(index, path, "{resume=True}", "give a new directory", more)
    if index["texts"] != consumed["texts"]:
        raise InputError(
            f"{{resume=True}}: {path}'s counts disagree (its texts are not the input's texts it "
            "says were consumed): give a new directory"
        )


def check_totals(index: dict, path: Path, what: str, advice: str, more: tuple = ()) -> None:
    """The index's counts (and `more`) whole numbers, each shard starting where the last
    ended, the totals their sums; else InputError naming `what` reads it, with `advice`. A
    shard dropped from the list would be texts missing without a word."""
    numbers = [index.get("texts"), index.get("tokens"), *more]
    numbers += [s.get(k) for s in index["shards"] for k in ("first", "texts", "tokens")]
    if not all(type(n) is int and n >= 0 for n in numbers):
        raise InputError(f"{what}: {path} has a count that is not a whole number, 0 or more")
    texts = [shard["texts"] for shard in index["shards"]]
    firsts = [shard["first"] for shard in index["shards"]]
    if (
        firsts != [0, *itertools.accumulate(texts)][: len(texts)]
        or index["texts"] != sum(texts)
        or index["tokens"] != sum(shard["tokens"] for shard in index["shards"])
    ):
        raise InputError(
            f"{what}: {path}'s counts disagree (its shards' texts and tokens do not add up "
            f"to its totals): {advice}"
        )


def check_out(directory: Path, resume: bool) -> None:
    """InputError unless `directory` is absent, empty, or with --resume an npbert corpus."""
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{{directory}} {directory} is a file, not a directory")
    if directory.is_symlink() and not directory.exists():  # mkdir would say "File exists"
        raise InputError(
            f"{{directory}} {directory} is a symbolic link to {os.readlink(directory)}, which "
            "does not exist: create that directory, or give another"
        )
    present = [p for p in directory.iterdir() if p.name != LOCK] if directory.exists() else []
    if present and not resume:
        held = (directory / LOCK).exists()  # a run is writing it, or was killed
        running = " (once it has ended, if it is still running)" if held else ""
        raise InputError(
            f"{{directory}} {directory} exists and is not empty: pass {{resume=True}} to continue "
            f"the run that wrote it{running}, or give a new directory"
        )
    others = [path.name for path in present if not is_pending(path)]
    if resume and not (directory / INDEX).exists() and others:
        raise InputError(
            f"{{resume=True}}: {directory} has no {INDEX} but holds other files ({others[0]}"
            f"{', ...' if len(others) > 1 else ''}): "
            "it is not an npbert corpus to continue"
        )


def start_index(directory: Path, settings: dict, resume: bool) -> dict:
    """A new index, or with --resume the existing one after checking it is the same job."""
    check_out(directory, resume)  # again, now that no other run writes it
    if not resume or not (directory / INDEX).exists():
        index = {**settings, "shards": [], "texts": 0, "tokens": 0, "complete": False}
        index["consumed"] = Consumed().state()  # nothing yet
        write_index(directory, index)
        return index
    index = read_index(directory, "{resume=True}")
    changed = [k for k in settings if k not in RECORDED and index.get(k) != settings[k]]
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
    check_counts(index, directory / INDEX)
    for shard in index["shards"]:
        for suffix in SHARD_FILES.values():
            if not (directory / f"{shard['name']}{suffix}.npy").is_file():
                raise InputError(
                    f"{{resume=True}}: {directory} has lost {shard['name']}{suffix}.npy, which its "
                    f"{INDEX} lists: give a new directory"
                )
        read_shard(directory, shard, index, "{resume=True}")
    remove_pending(directory)
    remove_unlisted(directory, len(index["shards"]))
    return index


def remove_unlisted(directory: Path, listed: int) -> None:
    """Shard files numbered past the index's `listed` shards: committed in the second before
    the run was killed (the index is written once a second), and embedded again as the run
    goes on, or else left behind, where the input now ends sooner."""
    for path in directory.iterdir():
        found = COMMITTED.fullmatch(path.name)
        if found and int(found[1]) >= listed:
            path.unlink(missing_ok=True)


SUFFIXES = "|".join(map(re.escape, SHARD_FILES.values()))
PENDING = re.compile(rf"\.shard-\d{{5,}}({SUFFIXES})\.npy")
COMMITTED = re.compile(rf"shard-(\d{{5,}})({SUFFIXES})\.npy")


def is_pending(path: Path) -> bool:
    """A shard's file written but not committed (hidden), or a temporary of npbert's."""
    return PENDING.fullmatch(path.name) is not None or is_temporary(path)


def remove_pending(directory: Path) -> None:
    """Files of shards that were written but not committed, and temporaries of an
    interrupted write: npbert's own names only, whatever else the directory holds."""
    for path in directory.iterdir():
        if is_pending(path):
            path.unlink(missing_ok=True)


def pending_path(directory: Path, name: str, suffix: str) -> Path:
    return directory / f".{name}{suffix}.npy"


def write_pending(directory: Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    """A shard's files, each written atomically under its hidden pending name."""
    for key, suffix in SHARD_FILES.items():
        write_atomically(
            pending_path(directory, name, suffix),
            lambda f, a=arrays[key]: np.save(f, a),
            sweep=False,  # see writing()
        )


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


# --- the local engine: worker processes ----------------------------------------------------


def shard_arrays(embedder: Embedder, records: list, truncation: bool, dtype: str) -> dict:
    """A chunk's records -> the shard's arrays (npbert.layer.ragged), on one thread."""
    encodings = tokenize(embedder, records, truncation)
    arrays = embed_encodings(embedder.weights, encodings, threads=1)
    with np.errstate(over="ignore"):  # past float16's range: Inf, as the caller was told
        arrays["embeddings"] = arrays["embeddings"].astype(dtype, copy=False)
    return arrays


def tokenize(embedder: Embedder, records: list, truncation: bool) -> list:
    """tokenizers Encodings of the records, in order; texts with and without pairs go in
    separate calls, each text named by where it is in errors."""
    encodings = {}
    for paired in (False, True):
        members = [i for i, r in enumerate(records) if (r.pair is not None) == paired]
        if members:
            encoded = embedder.tokenizer.encode_batch(
                [records[i].text for i in members],
                [records[i].pair for i in members] if paired else None,
                max_length=embedder.weights.config.max_length,
                truncation=truncation,
                names=[records[i].where for i in members],
                with_tokens=False,
            )
            encodings.update(zip(members, encoded, strict=True))
    ordered = [encodings[i] for i in range(len(records))]
    check_encodings(embedder, ordered, lambda row, token: records[row].where)
    return ordered


# Workers are forked at the start, each with its own tokenizer and chunks in memory; past the
# cores none runs faster, and thousands of them would exhaust memory before the first shard.
WORKERS_PER_CORE = 4


class LocalEngine:
    """Chunks embedded by `workers` forked processes (default: one per core; at most
    WORKERS_PER_CORE per core), each on one thread, each writing its shards' files; at most
    two chunks per worker in flight."""

    def __init__(self, embedder: Embedder, *, workers: int | None, truncation: bool, dtype):
        self.embedder, self.truncation, self.dtype = embedder, truncation, dtype
        if multiprocessing.current_process().daemon:  # before the directory is written
            raise InputError(
                "the corpus job starts worker processes, which a daemonic process (a "
                "multiprocessing.Pool's worker) may not: run it from one that may have children "
                "(concurrent.futures.ProcessPoolExecutor's workers may)"
            )
        cores = cpus()
        self.workers = cores if workers is None else check_count("workers", workers)
        if self.workers > WORKERS_PER_CORE * cores:
            raise InputError(
                f"workers={self.workers}: more than {WORKERS_PER_CORE} worker processes for each "
                f"of the {cores} cores this process may use; more run no faster, and each holds "
                "its own memory"
            )

    def __call__(self, directory: Path, named: Iterator[tuple[str, Chunk]]):
        weights = self.embedder.weights
        if tables.may_precompute(weights):  # made once, shared copy-on-write by the workers
            tables.precompute(weights)
        from concurrent.futures.process import BrokenProcessPool

        in_flight = deque()
        try:  # a worker that dies breaks the pool: the next submit or result raises
            with worker_pool(self.workers, (self.embedder, self.truncation, self.dtype)) as pool:
                for name, chunk in named:
                    future = pool.submit(embed_chunk, directory, name, chunk)
                    in_flight.append((name, chunk, future))
                    if len(in_flight) >= 2 * self.workers:
                        yield done(in_flight)
                while in_flight:
                    yield done(in_flight)
        except BrokenProcessPool:
            stopped = f" before {in_flight[0][0]}" if in_flight else ""
            raise WorkerLost(
                "a worker process ended abruptly (killed, or out of memory?) and the run "
                f"stopped{stopped}: the shards before it are kept; run again with {{resume=True}}"
            ) from None


def done(in_flight: deque) -> tuple[str, Chunk, int]:
    """The first chunk in flight, (name, chunk, its tokens), once its worker has written
    it; it stays in flight if that raises, so that the error can name it."""
    name, chunk, future = in_flight[0]
    try:
        tokens = future.result()
    except MemoryError:  # the worker's, sent back: an address-space limit (ulimit -v) says no
        raise out_of_memory(name, chunk) from None
    in_flight.popleft()
    return name, chunk, tokens


def out_of_memory(name: str, chunk: Chunk) -> WorkerLost:
    """What stops the run when a worker (or a Ray actor) had no memory for a shard."""
    return WorkerLost(
        f"a worker ran out of memory embedding {name} ({chunk.texts:,} texts, "
        f"{chunk.size:,} bytes of input) and the run stopped: the shards before it are "
        "kept; run again with {resume=True}, with a smaller {shard_bytes} or more memory"
    )


_job = None  # in a worker: (embedder, truncation, dtype), inherited through fork


def _start_worker(job, parent: int) -> None:
    global _job
    _job = job
    for number in (signal.SIGINT, signal.SIGTERM):  # for the main process to handle: it
        signal.signal(number, signal.SIG_IGN)  # kills its workers (and they die with it)
    die_with(parent)


def die_with(parent: int) -> None:
    """End this worker when the main process ends, even by kill -9: a worker waits on a
    queue whose other end it holds too (fork), so it would never see the end of it and
    would wait forever. Linux's PR_SET_PDEATHSIG does it at once; elsewhere a thread
    checks every second."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        import threading

        def watch():
            while os.getppid() == parent:
                time.sleep(1)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # it ended before the above took effect
        os._exit(1)


def embed_chunk(directory: Path, name: str, chunk: Chunk) -> int:
    """In a worker: embed one chunk and write its shard's pending files; returns its tokens."""
    embedder, truncation, dtype = _job
    arrays = shard_arrays(embedder, read_chunk(chunk), truncation, dtype)
    write_pending(directory, name, arrays)
    return len(arrays["embeddings"])


@contextmanager
def worker_pool(workers: int, job):
    """Forked worker processes that inherit the job (the weights, memory-mapped, and the
    centered word table: shared, not copied). Each tokenizes on one thread: the tokenizers
    library reads TOKENIZERS_PARALLELISM, set here for the children only."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(  # no worker yet: they are forked on the first submit
        workers, multiprocessing.get_context("fork"), _start_worker, (job, os.getpid())
    )
    try:
        with single_threaded_tokenizers(), stops_held():
            started = pool.submit(int)  # forks every worker, now
        started.result()  # (Ctrl-C stops this wait)
        yield pool
    except BaseException:  # an error, Ctrl-C, or the run closed early: the chunks in flight
        stop_workers(pool)  # are dropped, not waited for (a second Ctrl-C hung in that wait)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def single_threaded_tokenizers():
    """TOKENIZERS_PARALLELISM=false for the workers forked meanwhile, put back after."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


@contextmanager
def stops_held():
    """SIGINT and SIGTERM noted while the block runs, and handled as they would have been once
    it is done, for steps a stop must not cut in two: committing a shard (an index that lists
    it without its counts), and forking the workers (a handler that raises while os.fork runs
    does so in an at-fork hook, where Python drops the exception, "Exception ignored in ...",
    and the Ctrl-C was lost; the CLI's handler, which ignores further ones, left the run deaf
    to them). Outside the main thread, which alone runs handlers, nothing to do; nor to a
    handler set outside Python (getsignal gives None), which could not be put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    held = [n for n in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(n) is not None]
    try:
        with ExitStack() as handlers:  # each put back, even if a stop comes between two
            for number in held:
                previous = signal.signal(number, lambda n, _: noted.append(n))
                handlers.callback(signal.signal, number, previous)
            yield
    finally:
        if noted:
            signal.raise_signal(noted[0])  # to its own handler now


def stop_workers(pool) -> None:
    """Kill a process pool's workers and wait until they have ended, so that none writes a
    file after this returns. (ProcessPoolExecutor.kill_workers() comes in Python 3.14.)"""
    processes = list((pool._processes or {}).values())
    for process in processes:
        process.kill()
    for process in processes:
        process.join()


# --- reading ------------------------------------------------------------------------------


def read_corpus(directory: str | os.PathLike, *, partial: bool = False) -> Iterator[np.ndarray]:
    """Every text's embeddings, (L_i, width) in the run's dtype, in input order, memory-mapped,
    from a run of either engine. A run that has not completed (stopped, or still going) is
    refused unless partial=True, which reads the texts its shards hold so far."""
    directory = Path(check_path("directory", directory))
    index = read_index(directory, "read_corpus")
    check_totals(index, directory / INDEX, "read_corpus", "the corpus is damaged")
    if not check_flag("partial", partial) and index.get("complete") is not True:
        raise InputError(
            f"read_corpus: {directory} holds a run that has not completed (the first "
            f"{index.get('texts', 0):,} texts): finish it with {{resume=True}}, or pass "
            "partial=True to read what it holds"
        )
    for shard in index["shards"]:
        rows, lengths = read_shard(directory, shard, index, "read_corpus")
        for start, length in zip(np.cumsum(lengths) - lengths, lengths, strict=True):
            yield rows[start : start + length]


def read_shard(directory: Path, shard: dict, index: dict, what: str) -> tuple:
    """A shard's rows (tokens, E), memory-mapped, and its lengths (texts,), checked to agree
    with each other and the index (its tokens, width and dtype): sliced unchecked, a negative
    or wrong length would give another text's rows without a word, and a shard of another
    run, rows of another model. Else InputError naming `what` reads it."""
    path = regular_file(directory / f"{shard['name']}.npy", f"{what}:")
    with open(path, "rb") as f:  # a missing file stays FileNotFoundError, with its path
        check_header(f, os.fstat(f.fileno()).st_size, f"{what}: {path}")  # truncated, foreign
    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:  # object arrays: never unpickled
        raise InputError(f"{what}: {path} is not a readable shard ({error})") from None
    lengths = load_npy(directory / f"{shard['name']}.lengths.npy", f"{what}:")
    where = f"{what}: {directory / shard['name']}"
    if rows.ndim != 2 or lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise InputError(
            f"{where}: rows {rows.shape} {rows.dtype} and lengths {lengths.shape} "
            f"{lengths.dtype} are not a shard's (tokens, E) rows and (texts,) integer lengths"
        )
    listed = (shard.get("tokens"), index.get("hidden_size"), index.get("dtype"))
    if (*rows.shape, rows.dtype.name) != listed:
        raise InputError(
            f"{where}: its rows are {rows.shape} {rows.dtype}, where the index lists "
            f"{listed[0]} tokens of width {listed[1]} in {listed[2]}: the shard is not this "
            "run's, or damaged"
        )
    outside = ((lengths < 0) | (lengths > len(rows))).any()  # and so no sum that wraps around
    if outside or lengths.sum() != len(rows) or shard.get("texts") != len(lengths):
        raise InputError(
            f"{where}: its lengths {_summary(lengths)} do not match its {len(rows)} rows "
            f"and the {shard.get('texts')} texts the index lists: the corpus is damaged"
        )
    return rows, lengths


def _summary(lengths: np.ndarray) -> str:
    least = f", least {lengths.min()}" if len(lengths) else ""
    return f"({len(lengths)} texts, sum {lengths.sum()}{least})"
