"""The Ray cluster a run uses: the ray package imported, a cluster joined or started here,
its address checked first, and the process's SIGTERM handler kept through ray.init."""

import logging
import os
import signal
import socket
import threading
import time
import warnings
from contextlib import contextmanager
from typing import NoReturn

from npbert.errors import InputError
from npbert.layer.cores import cpus

# Ray's C++ failure-signal handler, installed as ray.init starts the driver's core: on
# SIGTERM it prints a stack dump and aborts, before this process's own handler is back. Ray
# reads whether to install it from this variable, once, as it is imported.
NO_CORE_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


def ray_package(local: bool = False):
    """The ray package, with Ray Data. local: a cluster of this machine alone is to be
    started, so its node listens on 127.0.0.1, not on the network (read by Ray when first
    imported). Where this process has a SIGTERM handler of its own, Ray is imported without
    its core's handler (NO_CORE_HANDLER)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report sent home
    if local:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        with environment(NO_CORE_HANDLER, "1", callable(signal.getsignal(signal.SIGTERM))):
            import ray
            import ray.data
    except ImportError:
        raise InputError("{engine='ray'} needs Ray Data: pip install 'npbert[ray]'") from None
    with warnings.catch_warnings():  # Ray Data's of its own deprecated fields, as it makes
        warnings.simplefilter("ignore", DeprecationWarning)  # the process's context
        ray.data.DataContext.get_current()
    return ray


@contextmanager
def environment(name: str, value: str, given: bool):
    """os.environ[name] = value while the block runs, where `given` and it is not set: for
    this process's import of Ray alone, not for the cluster's processes it starts later."""
    if not given or name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def connect(ray, address: str | None) -> bool:
    """Join the cluster at `address`, or start one on this machine; False when this process
    was already connected (then it stays connected)."""
    if ray.is_initialized():
        return False
    joining = cluster_address(address)
    # ray.init sets its own SIGTERM handler first thing (sys.exit(15)): a handler this
    # process had set is put back, so that a SIGTERM stops the run as it stops the local one
    # (the CLI's: "npbert: terminated", 143, the pending files gone), and a SIGTERM while init
    # runs (seconds) ends in that handler too. Python's default (to die at once) is not put
    # back: Ray's then stops its processes.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with hangups_ignored():
            ray.init(
                # "local" starts one here even where `ray start` left a cluster to join
                address=joining or "local",
                num_cpus=None if joining else cpus(),  # a cluster's own, when joining one
                include_dashboard=False,
                log_to_driver=False,  # the actors' logs stay in the cluster's log files
                logging_level=logging.ERROR,
            )
    except BaseException as error:
        init_failed(ray, error, joining, sigterm)
    _put_back(sigterm)
    # CRITICAL: Ray Data logs an actor's death at ERROR, with a traceback; the run says it in
    # one line (WorkerLost).
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    return True


@contextmanager
def hangups_ignored():
    """SIGHUP ignored while ray.init starts the cluster's processes, which keep it ignored (as
    the processes they start do): a closed terminal sends SIGHUP to the whole process group,
    and Ray's processes, dying of it, took the run down before it could stop as SIGHUP stops
    it ("npbert: hung up", exit 129, its lock and pending files removed). This process's own
    handling of it is put back after; in another thread, or with a handler set outside
    Python, nothing is changed."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGHUP) if main else None
    if previous is None:
        yield
        return
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def init_failed(ray, error: BaseException, joining: str | None, sigterm) -> NoReturn:
    """Raise what stops the run once ray.init has failed or been stopped, after stopping
    what it had started (not left to end minutes later)."""
    _after_init_failed(sigterm)
    try:
        if isinstance(error, ValueError | ConnectionError):  # no cluster for "auto", say
            reason = " ".join(str(error).split())  # Ray's may run over lines
            where = f"join the cluster at {joining}" if joining else "start a cluster here"
            raise InputError(f"Ray cannot {where}: {reason}") from None
        if isinstance(error, SystemExit) and error.code == signal.SIGTERM and callable(sigterm):
            sigterm(signal.SIGTERM, None)  # Ray's handler's exit: handled as any SIGTERM
        raise error
    finally:
        ray.shutdown()


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
    """InputError unless a Ray cluster's GCS (a gRPC server) listens at a host:port address.
    Ray retries a cluster it cannot reach for minutes, logging every try, and then ends the
    process; a TCP connection refused or timed out, or a server that is not gRPC, says it at
    once. "auto" and "scheme://..." (but http) are Ray's."""
    web = address is not None and address.startswith(("http://", "https://"))  # Ray refuses
    if address in (None, "auto") or ("://" in address and not web):  # ray://, a plugin's
        return
    host, _, port = address.rpartition(":")
    if web or not host or not port.isdigit():
        raise InputError(f"Ray address {address!r}: give host:port, auto or ray://host:port")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as link:  # [::1]
            answer = http2_answer(link)
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise InputError(f"no Ray cluster answers at {address}: {reason}") from None
    if answer[3:4] != SETTINGS:
        raise InputError(
            f"{address} answers, but not as a Ray cluster: its GCS speaks gRPC (HTTP/2), and this "
            "did not (is it the port the head node printed as it started?)"
        )


# HTTP/2's client preface and an empty SETTINGS frame. A gRPC server, as Ray's GCS is, answers
# with a SETTINGS frame (the 4th byte of its 9-byte header is the frame type, 4). Another
# server (a web server, a database) on the port made ray.init retry for minutes and log each
# try; Ray offers no check of this, so it is written out here.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS = b"\x04"
ANSWER_WAIT = 5.0  # seconds: a GCS answers at once


def http2_answer(link: socket.socket) -> bytes:
    """The first 9 bytes the server at `link` answers HTTP/2's preface with (fewer where it
    closes or stays silent for ANSWER_WAIT seconds)."""
    deadline = time.monotonic() + ANSWER_WAIT  # in all: a server may trickle a byte at a time
    link.settimeout(ANSWER_WAIT)
    link.sendall(PREFACE)
    answer = b""
    try:
        while len(answer) < 9 and (left := deadline - time.monotonic()) > 0:
            link.settimeout(left)
            if not (data := link.recv(9 - len(answer))):
                break
            answer += data
    except TimeoutError:
        pass
    return answer


# Ray Data's batch iterator tells its threads to stop when it is closed, and does not wait
# for them (ray.data's iter_threaded). One still waiting on Ray as ray.shutdown runs ends the
# process, "The core worker has already been shutdown", exit 1, before the run could say it
# stopped. They are waited for first, up to ITERATOR_WAIT seconds.
ITERATOR_THREAD = "iter_threaded"
ITERATOR_WAIT = 10.0


def join_iterator_threads() -> None:
    """Wait for Ray Data's iterator threads to end, before ray.shutdown."""
    deadline = time.monotonic() + ITERATOR_WAIT
    for thread in threading.enumerate():
        if thread.name == ITERATOR_THREAD and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
