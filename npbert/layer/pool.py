"""The fast path's threads: one pool for the process, blocks handed out from a shared iterator, and
an error in one thread stopping the others.
"""

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait

from npbert.errors import InputError
from npbert.layer.cores import cpus
from npbert.layer.inputs import check_count

# Past the cores no thread runs faster (they take turns holding the GIL between NumPy calls),
# and the process's pool keeps each thread it starts: as the corpus job's workers, at most
# this many a core.
THREADS_PER_CORE = 4


def check_threads(threads) -> int:
    """threads as a count, at most THREADS_PER_CORE for each core this process may use."""
    threads = check_count("threads", threads)
    cores = cpus()
    if threads > THREADS_PER_CORE * cores:
        raise InputError(
            f"threads={threads}: more than {THREADS_PER_CORE} threads for each of the {cores} "
            "cores this process may use; more run no faster, and each stays in the pool"
        )
    return threads


def run(work, ranges: list, threads: int) -> None:
    """work(share) on up to `threads` threads, all taking ranges from one
    shared iterator, so a core slowed by something else holds up no share of fixed size.
    NumPy releases the GIL inside take, the ufuncs and vecdot. (next() on a list iterator is
    atomic under the GIL.)"""
    threads = min(threads, len(ranges))
    share = iter(ranges)
    helpers = submit(work, share, threads - 1)
    try:
        stopping(work, share)  # this thread works too: one hand-off fewer than waiting
    finally:
        # Every thread done, error or not: none still writes when this returns. A helper
        # still queued (behind another call's work) would find no range left: cancelled.
        for helper in helpers:
            helper.cancel()
        wait(helpers)
    for helper in helpers:
        if not helper.cancelled():
            helper.result()


def stopping(work, share) -> None:
    """work(share); on an error, the ranges no thread has taken yet are dropped, so that the
    other threads stop after their block."""
    try:
        work(share)
    except BaseException:
        deque(share, 0)
        raise


def submit(work, share, helpers: int) -> list[Future]:
    """stopping(work, share) on up to `helpers` threads of the pool: as many as it takes. At
    interpreter exit (an atexit handler calling embed) it takes none, and where a thread
    cannot start, fewer: the calling thread does the rest. (A task queued for a thread that
    did not start finds the ranges all taken when it runs.)"""
    if helpers < 1:
        return []
    pool, futures = thread_pool(helpers), []
    for _ in range(helpers):
        try:
            futures.append(pool.submit(stopping, work, share))
        except RuntimeError:  # "... after interpreter shutdown", "can't start new thread"
            break
    return futures


_pool: dict[int, ThreadPoolExecutor] = {}  # {its threads: the pool}: at most one
_lock = threading.Lock()


def _after_fork() -> None:
    """A forked child inherits the pool but not its threads, and maybe the lock held: a call
    there would wait forever. The child starts with none and makes its own."""
    global _lock
    _pool.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool, with at least `workers` threads: kept for the process, as starting
    threads on every call cost about a fifth of a bert-base batch (scripts/bench.py), and one
    for all, grown if a call asks for more, so that idle threads do not pile up. A pool starts
    its threads as tasks need them, not all at once."""
    with _lock:
        size = next(iter(_pool), 0)
        if size < workers:
            if _pool:  # dropped, not shut down: a call that holds it may still submit to
                _pool.pop(size)  # it; its threads end once it is garbage
            _pool[workers] = ThreadPoolExecutor(workers, thread_name_prefix="npbert")
        return next(iter(_pool.values()))
