"""The corpus job's local engine: chunks embedded by forked worker processes, each on one
thread, each writing its shards' pending files (npbert.stream.shards)."""

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

from npbert.embedder import Embedder
from npbert.errors import InputError, WorkerLost
from npbert.layer import tables
from npbert.layer.cores import cpus
from npbert.stream.chunks import Chunk
from npbert.stream.records import read_chunk
from npbert.stream.settings import CorpusSettings
from npbert.stream.shards import out_of_memory, shard_arrays, write_pending
from npbert.stream.stops import STOPS, stops_held

# Workers are forked at the start, each with its own tokenizer and chunks in memory; past the
# cores none runs faster, and thousands of them would exhaust memory before the first shard.
WORKERS_PER_CORE = 4


class LocalEngine:
    """Chunks embedded by settings.workers forked processes (default: one per core; at most
    WORKERS_PER_CORE per core), each on one thread, each writing its shards' files; at most
    two chunks per worker in flight."""

    def __init__(self, embedder: Embedder, settings: CorpusSettings):
        self.embedder, self.settings = embedder, settings
        if multiprocessing.current_process().daemon:  # before the directory is written
            raise InputError(
                "the corpus job starts worker processes, which a daemonic process (a "
                "multiprocessing.Pool's worker) may not: run it from one that may have children "
                "(concurrent.futures.ProcessPoolExecutor's workers may)"
            )
        cores = cpus()
        self.workers = settings.workers or cores
        if self.workers > WORKERS_PER_CORE * cores:
            raise InputError(
                f"workers={self.workers}: more than {WORKERS_PER_CORE} worker processes for each "
                f"of the {cores} cores this process may use; more run no faster, and each holds "
                "its own memory"
            )

    def __call__(self, directory: Path, named: Iterator[tuple[str, Chunk]]):
        """(name, chunk, tokens) of each (name, chunk), in order, once its files are written."""
        weights = self.embedder.weights
        if tables.may_precompute(weights):  # made once, shared copy-on-write by the workers
            tables.precompute(weights)
        job = (self.embedder, self.settings.truncation, self.settings.dtype)
        in_flight = deque()
        try:  # a worker that dies breaks the pool: the next submit or result raises
            with worker_pool(self.workers, job) as pool:
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
                f"stopped{stopped}: any shards committed before it are kept; run again with "
                "{resume=True}"
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


_job = None  # in a worker: (embedder, truncation, dtype), inherited through fork


def _start_worker(job, parent: int) -> None:
    global _job
    _job = job
    for number in STOPS:  # for the main process to handle: it
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
    pool = ProcessPoolExecutor(  # no worker yet: they are forked on the first submit
        workers, multiprocessing.get_context("fork"), _start_worker, (job, os.getpid())
    )
    processes = []
    try:
        before = set(multiprocessing.active_children())
        with single_threaded_tokenizers(), stops_held():
            started = pool.submit(int)  # forks every worker, now
            processes = [p for p in multiprocessing.active_children() if p not in before]
        started.result()  # (Ctrl-C stops this wait)
        yield pool
    except BaseException:  # an error, Ctrl-C, or the run closed early: the chunks in flight
        stop_workers(processes)  # are dropped, not waited for: a second Ctrl-C would hang there
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


def stop_workers(processes: list) -> None:
    """Kill the pool's worker processes and wait until they have ended, so that none writes a
    file after this returns. They are the children this process started as the pool forked
    them (multiprocessing.active_children): the executor names its own only privately before
    Python 3.14's kill_workers."""
    for process in processes:
        process.kill()
    for process in processes:
        process.join()
