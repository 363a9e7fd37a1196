"""npbert on a Ray cluster, through Ray Data (pip install 'npbert[ray]').

    import ray, npbert.ray
    texts = ray.data.read_parquet("s3://bucket/corpus/")            # a `text` column
    embedded = npbert.ray.embed_dataset(texts, "sentence-transformers/all-MiniLM-L6-v2")
    embedded.write_parquet("s3://bucket/embedded/")

`Embed` is the callable class for `Dataset.map_batches`: each actor loads the model once (a
local directory, or a Hub repo id fetched into that node's cache: only the embedding
tensors), and embeds on one thread. `embed_corpus_on_ray` is `npbert embed --engine ray`:
the corpus job of npbert.stream.corpus with Ray actors in place of worker processes.

The module is named for what it adds (npbert.ray); it does not shadow the ray package
because imports are absolute (`import ray` here is the top-level package).
Nothing else in npbert imports it, so npbert's core never imports Ray.
"""

import math
import os
import signal
import socket
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from npbert.errors import InputError, WorkerLost
from npbert.layer.cores import cpus
from npbert.layer.inputs import check_count, shown
from npbert.stream.sources import Record

COLUMNS = ("embeddings", "input_ids", "token_type_ids", "lengths")
OUT_OF_MEMORY = "MemoryError"  # EmbedChunks' error for a shard it had no memory for


def _ray(local: bool = False):
    """The ray package. local: a cluster of this machine alone is to be started, so its
    node listens on 127.0.0.1, not on the network (read by Ray when first imported)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report sent home
    if local:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        import ray.data
    except ImportError:
        raise InputError("{engine='ray'} needs Ray Data: pip install 'npbert[ray]'") from None
    return ray


def _ragged(arrays: list) -> np.ndarray:
    """An object array of arrays, one per row: how Ray Data's numpy batches hold a column of
    arrays of different shapes (np.array would stack equal shapes or fail)."""
    column = np.empty(len(arrays), dtype=object)
    column[:] = arrays
    return column


class Embed:
    """For `Dataset.map_batches(Embed, fn_constructor_kwargs={"model": M}, ...)`.

    Takes numpy batches with a `text` column of strings and an optional `pair` column (strings,
    or None or NaN for a text without one; a `where` column, if any, names texts in errors).
    Adds, per text: embeddings (L_i, width) in `dtype`, input_ids and token_type_ids (L_i,) int64,
    lengths int64; padding is never computed nor returned. Other columns pass through. One model
    and one thread per actor.
    """

    def __init__(self, model, *, revision=None, full=False, truncation=False, dtype="float32"):
        from npbert.embedder import Embedder
        from npbert.stream.corpus import check_settings

        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the actor's one CPU
        check_settings(dtype, truncation)
        self.embedder = Embedder.from_pretrained(model, revision=revision, full=full)
        self.truncation, self.dtype = truncation, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from npbert.stream.corpus import shard_arrays

        if "text" not in batch:
            raise InputError(f"the dataset has no 'text' column (its columns: {', '.join(batch)})")
        taken = [column for column in COLUMNS if column in batch]
        if taken:
            raise InputError(f"the dataset has a column {taken[0]!r}, which Embed would replace")
        arrays = shard_arrays(self.embedder, _records(batch), self.truncation, self.dtype)
        lengths = arrays["lengths"]
        ends = np.cumsum(lengths)[:-1]
        split = {  # np.split of no texts would still give one piece
            key: _ragged(np.split(arrays[key], ends) if len(lengths) else [])
            for key in ("embeddings", "input_ids", "token_type_ids")
        }
        return {**batch, **split, "lengths": lengths}


def pinned_revision(model, revision: str | None) -> str | None:
    """The commit a Hub repo's revision (default: main) names, as this process resolves it
    (from its cache, else the Hub), for every actor to load: an actor resolving a branch
    itself could find another commit, an older one in its node's cache or one pushed since.
    A directory, and a name this process finds neither on disk nor on the Hub nor in its
    cache (a directory on the actors' nodes only, or a driver offline), are left to the
    actors, with the revision as given."""
    from npbert.loading.hub import NotFound, resolve

    if not isinstance(model, str):  # a path object: a directory
        return revision
    try:
        return resolve(model, revision=revision)[1].get("commit", revision)
    except NotFound:
        return revision


def _records(batch: dict[str, np.ndarray]) -> list[Record]:
    texts = batch["text"]
    if isinstance(texts, str | bytes):  # iterated, its characters would be the texts
        raise InputError("the batch's 'text' is one string: give a column of texts")
    pairs = batch.get("pair", [None] * len(texts))
    wheres = batch.get("where", [f"text {i} of its batch" for i in range(len(texts))])
    lengths = {"pair": len(pairs), "where": len(wheres)}
    for column, length in lengths.items():
        if isinstance(batch.get(column), str | bytes) or length != len(texts):
            raise InputError(f"the batch's {column!r} column is not one entry per text")
    records = []
    for where, text, pair in zip(wheres, texts, pairs, strict=True):
        if not isinstance(text, str):
            raise InputError(f"{where}: 'text' is {type(text).__name__}, not a string")
        if _missing(pair):
            pair = None
        elif not isinstance(pair, str):  # str() made b"x" into "b'x'"
            raise InputError(f"{where}: 'pair' is {type(pair).__name__}, not a string or None")
        records.append(Record(str(where), text, pair))
    return records


def _missing(value) -> bool:
    """Whether a `pair` value stands for none: None, or NaN, as a block whose pairs are all None
    (Arrow's null type) reaches numpy batches, and as pandas marks a missing value (pd.NA in
    its string dtype)."""
    if value is None or value is getattr(sys.modules.get("pandas"), "NA", None):
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def embed_dataset(
    dataset,
    model: str | os.PathLike,
    *,
    batch_size: int = 256,
    actors: int | None = None,
    cpus_per_actor: float = 1.0,
    dtype: str = "float32",
    truncation: bool = False,
    revision: str | None = None,
):
    """The Dataset with each text's embeddings (see Embed), computed by `actors` actors
    (default: default_actors) of `cpus_per_actor` CPUs each, on batches of `batch_size` texts.
    Order follows the input where the DataContext preserves it. A Hub repo's revision is
    resolved here, once (see pinned_revision)."""
    from npbert.stream.corpus import check_settings

    ray = _ray()
    check_settings(dtype, truncation)
    revision = pinned_revision(model, revision)
    batch_size = check_count("batch_size", batch_size)
    if isinstance(cpus_per_actor, bool) or not (
        isinstance(cpus_per_actor, int | float) and 0 < cpus_per_actor < math.inf
    ):
        raise InputError(f"cpus_per_actor must be a number above 0, got {shown(cpus_per_actor)}")
    if actors is None:
        actors = default_actors(ray.cluster_resources().get("CPU", 1), cpus_per_actor)
    actors = check_count("actors", actors)
    return dataset.map_batches(
        Embed,
        fn_constructor_kwargs={
            "model": os.fspath(model),
            "revision": revision,
            "truncation": truncation,
            "dtype": dtype,
        },
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=actors,
        num_cpus=cpus_per_actor,
    )


def default_actors(cpus: float, cpus_per_actor: float) -> int:
    """As many actors as the cluster's CPUs hold, but one CPU, and at most 4 a CPU: Ray Data's
    own tasks (reading Parquet, say) each need one, and actors that hold every CPU leave them
    none: the Dataset then waits forever (ray.data.read_parquet on two CPUs, two actors of one
    CPU each). At least one, even where it holds every CPU (one CPU, or cpus_per_actor above
    the CPUs but one): then give actors and cpus_per_actor to leave one free."""
    from npbert.stream.corpus import WORKERS_PER_CORE

    most = max(1, int(WORKERS_PER_CORE * cpus))  # as the corpus job's actors: check_actors
    return min(max(1, int(max(cpus - 1, 0) // cpus_per_actor)), most)


# --- npbert embed --engine ray: the corpus job on Ray actors --------------------------------


class EmbedChunks:
    """The corpus job's actor: each row a chunk of the input (npbert.stream.sources.Chunk) and its
    shard's name; returns the shard's arrays as one row, the texts back to back."""

    def __init__(self, model, *, revision=None, full=False, truncation=False, dtype="float32"):
        # A model this node cannot load (a directory that is not here, a Hub it cannot reach)
        # is said for each chunk, as bad input is: raised here, the actor died, and the run
        # said "killed, or out of memory?" with the reason in Ray's log files alone.
        self.embed, self.unloaded = None, ""
        try:
            self.embed = Embed(
                model, revision=revision, full=full, truncation=truncation, dtype=dtype
            )
        except InputError as error:
            self.unloaded = (
                f"a Ray actor cannot load the model: {error.message} (the shards before are kept: "
                "once every node can load it, run again with {resume=True})"
            )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shards = [self.shard(chunk) for chunk in batch["chunk"]]
        return {
            "name": batch["name"],
            "error": np.array([error for error, _ in shards], dtype=object),
            **{key: _ragged([shard[key] for _, shard in shards]) for key in COLUMNS},
        }

    def shard(self, chunk) -> tuple[str, dict]:
        """("", the shard's arrays), or (the message, empty arrays) for bad input, or
        (OUT_OF_MEMORY, empty arrays): the error goes back in order with the shards, as data
        (raised here, Ray would hand the driver a wrapper without the InputError or
        MemoryError, and its traceback on the terminal)."""
        from npbert.stream.corpus import shard_arrays
        from npbert.stream.sources import read_chunk

        embed = self.embed
        if embed is None:
            return self.unloaded, self.empty()
        try:
            records = read_chunk(chunk)
            return "", shard_arrays(embed.embedder, records, embed.truncation, embed.dtype)
        except InputError as error:
            return str(error), self.empty()
        except MemoryError:  # the driver names the shard, as the local job does
            return OUT_OF_MEMORY, self.empty()

    def empty(self) -> dict[str, np.ndarray]:
        embed = self.embed
        width = 0 if embed is None else embed.embedder.weights.config.output_size
        dtype = np.float32 if embed is None else embed.dtype
        empty = np.empty(0, np.int64)
        arrays = {"embeddings": np.empty((0, width), dtype), "lengths": empty}
        return {**arrays, "input_ids": empty, "token_type_ids": empty}


def check_actors(workers: int, cpus: float) -> None:
    """InputError for more actors than the local engine would start workers (each a process)."""
    from npbert.stream.corpus import WORKERS_PER_CORE

    if workers > WORKERS_PER_CORE * cpus:
        raise InputError(
            f"workers={workers}: more than {WORKERS_PER_CORE} actors for each of the "
            f"cluster's {cpus:g} CPUs; more run no faster, and each holds its own memory"
        )


def _lost() -> tuple:
    """Ray's errors for an actor, worker or node that is gone (Ray imported only if it is)."""
    import ray.exceptions as errors

    return (errors.RayActorError, errors.WorkerCrashedError, errors.NodeDiedError,
            errors.OutOfMemoryError)  # fmt: skip


class RayEngine:
    """npbert.stream.corpus's engine on a Ray cluster. The driver (this process) scans the input
    into chunks, Ray Data hands them to `workers` actors (EmbedChunks), and the shards come
    back to the driver in input order (preserve_order), which writes and commits each one as
    the local job does: one writer, the same files, the same index, the same --resume."""

    def __init__(self, model, *, revision, full, truncation, dtype, workers, address):
        self.model, self.revision, self.full = os.fspath(model), revision, full
        self.truncation, self.dtype = truncation, dtype
        self.workers = None if workers is None else check_count("workers", workers)
        if address is not None and not str(address).strip():
            raise InputError("the Ray address is empty: give host:port, or none to start a cluster")
        joining = cluster_address(address)
        check_address(joining)  # before the run writes its directory
        ray = sys.modules.get("ray")
        connected = ray is not None and ray.is_initialized()  # kept: see connect
        if self.workers is not None and joining is None and not connected:
            check_actors(self.workers, cpus())  # a cluster to be started here, of cpus()
        self.address = address

    def __call__(self, directory: Path, named):
        ray = _ray(local=self.address is None)
        started = None
        context = ray.data.DataContext.get_current()  # the process's: set in dataset()
        settings = context.execution_options.preserve_order, context.enable_progress_bars
        try:
            for items in windows(named, WINDOW_BYTES):
                if started is None:
                    started = connect(ray, self.address)
                yield from self.window(ray, directory, items)
        finally:
            context.execution_options.preserve_order, context.enable_progress_bars = settings
            if started:
                join_iterator_threads()
                ray.shutdown()

    def window(self, ray, directory: Path, items: list[dict]):
        """The shards of `items` (name, chunk), in input order, from one Dataset."""
        from npbert.stream.corpus import out_of_memory, write_pending

        done = 0  # shards come back in input order: items[done] is the next
        batches = iter(self.dataset(ray, items).iter_batches(batch_size=1, batch_format="numpy"))
        try:
            for batch in batches:
                if batch["error"][0] == OUT_OF_MEMORY:
                    raise out_of_memory(items[done]["name"], items[done]["chunk"])
                if batch["error"][0]:
                    raise InputError(batch["error"][0])
                name = str(batch["name"][0])
                arrays = {key: np.asarray(batch[key][0]) for key in COLUMNS}
                write_pending(directory, name, arrays)
                yield name, items[done]["chunk"], len(arrays["embeddings"])
                done += 1
        except _lost() as error:  # Ray's message, dozens of lines, says why; the run stops here
            where = f" before {items[done]['name']}" if done < len(items) else ""
            raise WorkerLost(
                f"a Ray actor or worker ended abruptly ({type(error).__name__}: killed, or out "
                f"of memory?) and the run stopped{where}: the shards before it are kept; run "
                "again with {resume=True}"
            ) from None
        finally:
            # Closed now, not by the garbage collector (the traceback of a Ctrl-C holds it):
            # this stops Ray Data's executor and tells its iterator threads to stop, which
            # join_iterator_threads then waits for, before ray.shutdown.
            batches.close()

    def dataset(self, ray, items: list[dict]):
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # shards must come back in order
        context.enable_progress_bars = False  # npbert's own bar counts the input
        cpus = ray.cluster_resources().get("CPU", 1)
        with warnings.catch_warnings():  # max_restarts will become a named parameter
            warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated")
            return self.embedded(ray.data.from_items(items), cpus, len(items))

    def embedded(self, dataset, cpus: float, chunks: int):
        workers = self.workers or max(1, int(cpus))
        check_actors(workers, cpus)
        # No more actors than chunks: from_items gives each chunk its block (up to 200), and
        # an actor more than the blocks would load the model for nothing, and Ray Data warns
        workers = min(workers, chunks)
        return dataset.map_batches(
            EmbedChunks,
            fn_constructor_kwargs={
                "model": self.model,
                "revision": self.revision,
                "full": self.full,
                "truncation": self.truncation,
                "dtype": self.dtype,
            },
            batch_size=1,
            batch_format="numpy",
            concurrency=workers,
            num_cpus=actor_cpus(cpus, workers),
            # An actor that dies is not restarted: the run stops, and --resume goes on from
            # the last shard written. (Restartable actors whose arguments sit in the object
            # store, as Ray Data's do, make Ray print an error-level warning on every run.)
            max_restarts=0,
        )


# Bytes of standard input a Dataset carries at most. A file's chunks are byte ranges that the
# actors read, and all go in one Dataset; stdin cannot be read twice, so its chunks carry
# their bytes, and the driver held all of it, and copies, before the first shard. 130 MB of
# stdin on tiny-bert, two actors (AMD EPYC): the driver's peak RSS was 1023 MB in one
# Dataset, 801 MB in windows of 64 MiB, in 127 s and 130 s. Each window starts its actors
# anew, about a minute of embedding apart.
WINDOW_BYTES = 64 << 20


def windows(named, limit: int):
    """(name, chunk) pairs as lists of {"name", "chunk"} items, each ending once its chunks
    carry `limit` bytes of data (the input's chunks, lazily: one window in memory at once).
    Bad input found as the input is read (a Parquet row that is not UTF-8, found when the
    4,096 rows around it are decoded) ends the last window, which is embedded before the error
    is raised: the shards cut before it are kept (the local job keeps those done by then)."""
    items, size = [], 0
    try:
        for name, chunk in named:
            items.append({"name": name, "chunk": chunk})
            size += len(chunk.data or b"")
            if size >= limit:
                yield items
                items, size = [], 0
    except InputError:
        if items:
            yield items
        raise
    if items:
        yield items


def actor_cpus(cpus: float, workers: int) -> float:
    """CPUs to reserve per actor: one, unless the actors would then take every CPU. Actors
    that hold all of a node's CPUs starve Ray Data's own tasks, and the run hangs (two
    actors of one CPU each on a two-CPU node did); half a CPU is left free."""
    return min(1.0, int((cpus - 0.5) / workers * 100) / 100) if cpus > 0.5 else 0.01


# Ray Data's batch iterator tells its threads to stop when it is closed, and does not wait
# for them (ray.data's iter_threaded). One still waiting on Ray as ray.shutdown runs ends the
# process, "The core worker has already been shutdown", exit 1, before the run could say it
# stopped: 1 of 33 Ctrl-Cs did so. They are waited for first, up to ITERATOR_WAIT seconds.
ITERATOR_THREAD = "iter_threaded"
ITERATOR_WAIT = 10.0


def join_iterator_threads() -> None:
    """Wait for Ray Data's iterator threads to end, before ray.shutdown."""
    deadline = time.monotonic() + ITERATOR_WAIT
    for thread in threading.enumerate():
        if thread.name == ITERATOR_THREAD and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def connect(ray, address: str | None) -> bool:
    """Join the cluster at `address`, or start one on this machine; False when this process
    was already connected (then it stays connected)."""
    import logging

    if ray.is_initialized():
        return False
    joining = cluster_address(address)
    # ray.init sets its own SIGTERM handler first thing (sys.exit(15)), and its C++ core one
    # that prints a stack dump and aborts: a handler this process had set is put back, so that
    # a SIGTERM stops the run as it stops the local one (the CLI's: "npbert: terminated", 143,
    # the pending files gone), and a SIGTERM while init runs (seconds) ends in that handler
    # too. Python's default (to die at once) is not put back: Ray's then stops its processes.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with core_handler_off(ray, callable(sigterm)):
            ray.init(
                # "local" starts one here even where `ray start` left a cluster to join
                address=joining or "local",
                num_cpus=None if joining else cpus(),  # a cluster's own, when joining one
                include_dashboard=False,
                log_to_driver=False,  # the actors' logs stay in the cluster's log files
                logging_level=logging.ERROR,
            )
    except BaseException as error:
        _after_init_failed(sigterm)
        try:
            if isinstance(error, ValueError | ConnectionError):  # no cluster for "auto", say
                reason = " ".join(str(error).split())  # Ray's may run over lines
                where = f"join the cluster at {joining}" if joining else "start a cluster here"
                raise InputError(f"Ray cannot {where}: {reason}") from None
            if isinstance(error, SystemExit) and error.code == signal.SIGTERM and callable(sigterm):
                sigterm(signal.SIGTERM, None)  # Ray's handler's exit: handled as any SIGTERM
            raise
        finally:
            ray.shutdown()  # what init had started: stopped, not left to end minutes later
    _put_back(sigterm)
    # CRITICAL: Ray Data logs an actor's death at ERROR, with a traceback; the run says it in
    # one line (WorkerLost).
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    return True


@contextmanager
def core_handler_off(ray, off: bool):
    """Ray's C++ failure-signal handler left out of this process while ray.init runs, where
    `off` (the cluster's processes keep theirs): on SIGTERM it prints a stack dump and aborts,
    before this process's own handler is back. It handles SIGSEGV and the like too, so the
    setting (read as the driver's core starts) is put back after."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    name = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"
    if not off or constants is None or not hasattr(constants, name):
        yield
        return
    before = getattr(constants, name)
    setattr(constants, name, True)
    try:
        yield
    finally:
        setattr(constants, name, before)


def _after_init_failed(sigterm) -> None:
    """SIGTERM's handler once ray.init has failed or been stopped: ignored where a stop's
    handler has set stops to be ignored (the CLI's do, so that nothing cuts short what follows:
    ray.shutdown, the run's cleanup), else as it was before ray.init."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.SIG_IGN in (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        _put_back(sigterm)


def _put_back(sigterm) -> None:
    """SIGTERM's handler as it was before ray.init, where this process had set one."""
    if threading.current_thread() is threading.main_thread() and callable(sigterm):
        signal.signal(signal.SIGTERM, sigterm)


def cluster_address(address: str | None) -> str | None:
    """The cluster Ray joins for `address`: it, or RAY_ADDRESS in place of None or "auto";
    None to start one on this machine."""
    if address in (None, "auto"):
        return os.environ.get("RAY_ADDRESS") or address
    return None if address == "local" else address


def check_address(address: str | None) -> None:
    """InputError unless something listens at a host:port address. Ray retries a cluster it
    cannot reach for minutes, logging every try, and then ends the process; a TCP connection
    refused or timed out says it at once. "auto" and "scheme://..." (but http) are Ray's."""
    web = address is not None and address.startswith(("http://", "https://"))  # Ray refuses
    if address in (None, "auto") or ("://" in address and not web):  # ray://, a plugin's
        return
    host, _, port = address.rpartition(":")
    if web or not host or not port.isdigit():
        raise InputError(f"Ray address {address!r}: give host:port, auto or ray://host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()  # [::1]
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise InputError(f"no Ray cluster answers at {address}: {reason}") from None


def embed_corpus_on_ray(
    model: str | os.PathLike,
    source: str | os.PathLike,
    directory: str | os.PathLike,
    *,
    revision: str | None = None,
    full: bool = False,
    address: str | None = None,
    workers: int | None = None,
    input_format: str | None = None,
    shard_bytes: int = 1 << 16,
    truncation: bool = False,
    resume: bool = False,
    dtype: str = "float32",
    progress: str | None = None,
) -> dict:
    """npbert.stream.corpus.embed_corpus on a Ray cluster (`address`, or one started here) with
    `workers` actors: the same shards, index and --resume. Returns the index."""
    from npbert.embedder import Embedder
    from npbert.stream.corpus import corpus_settings, run_job

    embedder = Embedder.from_pretrained(model, revision=revision, full=full)  # for the index
    settings = corpus_settings(embedder, source, input_format, shard_bytes, truncation, dtype)
    # the actors load the commit the index records (see pinned_revision)
    commit = embedder.weights.source.get("commit", revision)
    engine = RayEngine(
        model, revision=commit, full=full, truncation=truncation, dtype=dtype,
        workers=workers, address=address,
    )  # fmt: skip
    return run_job(settings, directory, engine, resume=resume, progress=progress)
