"""The corpus job of npbert.stream on a Ray cluster: `embed_corpus_on_ray`, its engine
(RayEngine) and its actor (EmbedChunks).

The driver (this process) scans the input into chunks, Ray Data hands them to the actors,
and the shards come back to the driver in input order (preserve_order), which writes and
commits each one as the local job does: one writer, the same files, the same index, and a
run resumed on either engine.
"""

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from npbert.embedder import Embedder
from npbert.errors import InputError, WorkerLost
from npbert.layer.cores import cpus
from npbert.ray.cluster import (
    check_address,
    cluster_address,
    connect,
    join_iterator_threads,
    ray_package,
)
from npbert.ray.dataset import COLUMNS, Embed, _ragged
from npbert.stream.chunks import Chunk
from npbert.stream.corpus import run_job
from npbert.stream.index import index_header
from npbert.stream.local import WORKERS_PER_CORE
from npbert.stream.records import read_chunk
from npbert.stream.settings import CorpusSettings, settings_of
from npbert.stream.shards import out_of_memory, shard_arrays, write_pending

OUT_OF_MEMORY = "MemoryError"  # EmbedChunks' error for a shard it had no memory for

# Bytes of standard input a Dataset carries at most. A file's chunks are byte ranges that the
# actors read, and all go in one Dataset; stdin cannot be read twice, so its chunks carry
# their bytes, and in one Dataset the driver would hold all of it, and copies, before the
# first shard. Each window starts its actors anew.
WINDOW_BYTES = 64 << 20


def embed_corpus_on_ray(
    model: str | os.PathLike,
    source: str | os.PathLike,
    directory: str | os.PathLike,
    *,
    revision: str | None = None,
    full: bool = False,
    settings: CorpusSettings | None = None,
    **options,
) -> dict:
    """npbert.stream.embed_corpus on a Ray cluster (settings.address, or one started here)
    with settings.workers actors: the same shards, index and resumed runs. Returns the index.
    options: CorpusSettings' fields by name, over `settings`; the engine is "ray"."""
    settings = settings_of(settings, {**options, "engine": "ray"})
    embedder = Embedder.from_pretrained(model, revision=revision, full=full)  # for the index
    header = index_header(embedder, source, settings)
    # the actors load the commit the index records (see npbert.ray.dataset.pinned_revision)
    commit = embedder.weights.source.get("commit", revision)
    engine = RayEngine(model, revision=commit, full=full, settings=settings)
    return run_job(header, directory, engine, settings)


class EmbedChunks:
    """The corpus job's actor: each row a chunk of the input (npbert.stream.chunks.Chunk) and
    its shard's name; returns the shard's arrays as one row, the texts back to back."""

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        revision: str | None = None,
        full: bool = False,
        settings: CorpusSettings | None = None,
    ):
        # A model this node cannot load (a directory that is not here, a Hub it cannot reach)
        # is said for each chunk, as bad input is: raised here, the actor would die, and the
        # run would say "killed, or out of memory?" with the reason in Ray's log files alone.
        settings = settings or CorpusSettings()
        self.embed, self.unloaded = None, ""
        try:
            self.embed = Embed(
                model, revision=revision, full=full, truncation=settings.truncation,
                dtype=settings.dtype,
            )  # fmt: skip
        except InputError as error:
            self.unloaded = (
                f"a Ray actor cannot load the model: {error.message} (any shards committed "
                "before are kept: once every node can load it, run again with {resume=True})"
            )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shards = [self.shard(chunk) for chunk in batch["chunk"]]
        return {
            "name": batch["name"],
            "error": np.array([error for error, _ in shards], dtype=object),
            **{key: _ragged([shard[key] for _, shard in shards]) for key in COLUMNS},
        }

    def shard(self, chunk: Chunk) -> tuple[str, dict]:
        """("", the shard's arrays), or (the message, empty arrays) for bad input, or
        (OUT_OF_MEMORY, empty arrays): the error goes back in order with the shards, as data
        (raised here, Ray would hand the driver a wrapper without the InputError or
        MemoryError, and its traceback on the terminal)."""
        embed = self.embed
        if embed is None:
            return self.unloaded, self.empty()
        try:
            records = read_chunk(chunk)
            return "", shard_arrays(embed.embedder, records, embed.truncation, embed.dtype)
        except InputError as error:
            return error.message, self.empty()  # its arguments in braces, for the driver
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
    if workers > WORKERS_PER_CORE * cpus:
        raise InputError(
            f"workers={workers}: more than {WORKERS_PER_CORE} actors for each of the "
            f"cluster's {cpus:g} CPUs; more run no faster, and each holds its own memory"
        )


def _lost(ray) -> tuple:
    """Ray's errors for an actor, worker or node that is gone."""
    errors = ray.exceptions
    return (errors.RayActorError, errors.WorkerCrashedError, errors.NodeDiedError,
            errors.OutOfMemoryError)  # fmt: skip


class RayEngine:
    """npbert.stream.corpus's engine on a Ray cluster: the chunks embedded by
    settings.workers actors (EmbedChunks), their shards written by this process."""

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        revision: str | None,
        full: bool,
        settings: CorpusSettings,
    ):
        self.model, self.revision, self.full = os.fspath(model), revision, full
        self.settings, self.address = settings, settings.address
        self.ray = ray_package(local=self.address is None)  # before the run writes its
        joining = cluster_address(self.address)  # directory, as is the address
        check_address(joining)
        connected = self.ray.is_initialized()  # kept: see connect
        if settings.workers is not None and joining is None and not connected:
            check_actors(settings.workers, cpus())  # a cluster to be started here, of cpus()

    def __call__(self, directory: Path, named: Iterator[tuple[str, Chunk]]):
        """(name, chunk, tokens) of each (name, chunk), in order, once its files are written."""
        ray, started = self.ray, None
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
        except _lost(ray) as error:  # Ray's message, dozens of lines, says why; the run stops here
            where = f" before {items[done]['name']}" if done < len(items) else ""
            raise WorkerLost(
                f"a Ray actor or worker ended abruptly ({type(error).__name__}: killed, or out "
                f"of memory?) and the run stopped{where}: any shards committed before it are "
                "kept; run again with {resume=True}"
            ) from None
        finally:
            # Closed now, not by the garbage collector (the traceback of a Ctrl-C holds it):
            # this stops Ray Data's executor and tells its iterator threads to stop, which
            # join_iterator_threads then waits for, before ray.shutdown.
            batches.close()

    def dataset(self, ray, items: list[dict]):
        """The Dataset of `items`, mapped by the actors, its rows in input order."""
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # shards must come back in order
        context.enable_progress_bars = False  # npbert's own bar counts the input
        cpus = ray.cluster_resources().get("CPU", 1)
        with warnings.catch_warnings():  # max_restarts will become a named parameter
            warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated")
            return self.embedded(ray.data.from_items(items), cpus, len(items))

    def embedded(self, dataset, cpus: float, chunks: int):
        workers = self.settings.workers or max(1, int(cpus))
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
                "settings": self.settings,
            },
            batch_size=1,
            batch_format="numpy",
            concurrency=workers,
            num_cpus=actor_cpus(cpus, workers),
            # An actor that dies is not restarted: the run stops, and a resumed run goes on
            # from the last shard written. (Restartable actors whose arguments sit in the
            # object store, as Ray Data's do, make Ray print an error-level warning on every
            # run.)
            max_restarts=0,
        )


def windows(named: Iterator[tuple[str, Chunk]], limit: int) -> Iterator[list[dict]]:
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
    actors of one CPU each on a two-CPU node); half a CPU is left free."""
    return min(1.0, int((cpus - 0.5) / workers * 100) / 100) if cpus > 0.5 else 0.01
