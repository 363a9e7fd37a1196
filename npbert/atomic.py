"""Writing files and directories so that an interrupted run never leaves a partial one: build
under a temporary name beside the target, then rename into place (atomic on one filesystem).

Modes follow the umask, as for any file a program creates and as huggingface_hub's cache
blobs do: the temporaries are made with os.open(0o666) and os.mkdir(0o777), which the kernel
masks, where tempfile's mkstemp and mkdtemp would make every file 0600 and directory 0700.

A run killed with SIGKILL cannot remove its temporary, so every write first removes the
stale temporaries beside its target: names of the form `.{target}.npbert-{8 hex digits}.tmp`,
and of those only the ones whose writer is gone. A writer holds an exclusive flock on its
temporary for as long as it runs, and the kernel drops the lock when the process ends,
however it ends: a temporary whose lock can be taken is stale. Creating and locking a
temporary happen under a shared lock on the directory, removing stale ones under an
exclusive one, so a temporary is never seen unlocked while its writer lives.
"""

import fcntl
import glob
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from npbert.errors import InputError

MARK = "npbert-"


def check_output_file(path: Path, option: str, suffixes: tuple[str, ...]) -> None:
    """InputError unless `path`, given as `option`, names a file with one of `suffixes` (any
    case), not a directory, in a directory that exists."""
    if path.suffix.lower() not in suffixes:
        names = " or ".join(filter(None, [", ".join(suffixes[:-1]), suffixes[-1]]))
        raise InputError(f"{option} {path}: use a {names} file name")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{option} {path}: directory {directory} does not exist")
    if path.is_dir():
        raise InputError(f"{option} {path} is a directory: give a file name")


def temporary_name(target: Path) -> Path:
    """A fresh temporary name beside `target`, hidden, of npbert's own naming."""
    return target.with_name(f".{target.name}.{MARK}{secrets.token_hex(4)}.tmp")


def is_temporary_of(path: Path, target: Path) -> bool:
    """Whether `path` is named as one of npbert's temporaries for `target`."""
    pattern = rf"\.{re.escape(target.name)}\.{MARK}[0-9a-f]{{8}}\.tmp"
    return re.fullmatch(pattern, path.name) is not None


def is_temporary(path: Path) -> bool:
    """Whether `path` is named as one of npbert's temporaries, for any target."""
    return re.fullmatch(rf"\..+\.{MARK}[0-9a-f]{{8}}\.tmp", path.name) is not None


def write_atomically(path: Path, write, *, sweep: bool = True) -> None:
    """write(file object) to a temporary file beside `path`, then rename it into place. An
    OSError names `path`, the file asked for, not the temporary the caller never saw.
    sweep=False: leave the stale temporaries to the caller, which holds the directory and
    clears them itself (listing it for each of thousands of files written there is slow)."""
    path = Path(path)
    with _naming(path):
        if sweep:
            remove_stale(path)
        temporary, fd = _claim(path, _create)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                write(f)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)  # and with it the lock, once the temporary is renamed or removed


def _create(temporary: Path) -> int:
    return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        if error.errno is None and type(error) is not OSError:  # not a file's (an HTTP error)
            raise
        # NumPy's short writes are plain OSErrors with no errno nor file name, nor the reason
        reason = error.strerror or f"{error}: a short write (the disk, or a quota, is full?)"
        raise OSError(error.errno, reason, str(path)) from error


@contextmanager
def building_directory(target: Path) -> Iterator[Path]:
    """A temporary directory beside `target`, renamed to it when the block completes and
    removed when it does not. An OSError in the block names `target` too."""
    target = Path(target)
    with _naming(target):
        remove_stale(target)
        building, fd = _claim(target, _make_directory)
    try:
        with _naming(target):
            yield building
            building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
        os.close(fd)


def remove_stale(target: Path) -> None:
    """Remove the temporaries beside `target` that killed runs left: npbert's naming, and no
    live writer holding the lock."""
    with _locked(target.parent, fcntl.LOCK_EX):
        for name in glob.glob(f".{glob.escape(target.name)}.{MARK}*.tmp", root_dir=target.parent):
            path = target.parent / name
            if not (is_temporary_of(path, target) and _unlocked(path)):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _make_directory(path: Path) -> int:
    os.mkdir(path, 0o777)
    return os.open(path, os.O_RDONLY)


def _claim(target: Path, create) -> tuple[Path, int]:
    """A new temporary beside `target`, made by create(path) -> fd, and its lock held."""
    temporary = temporary_name(target)
    with _locked(target.parent, fcntl.LOCK_SH):
        fd = create(temporary)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return temporary, fd


def _unlocked(path: Path) -> bool:
    """Whether no process holds the lock on `path` (then nothing is writing it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: a FIFO would wait
    except OSError:  # gone meanwhile, or not ours to open: leave it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@contextmanager
def _locked(directory: Path, operation: int) -> Iterator[None]:
    """flock on a directory: shared while temporaries are made, exclusive while stale ones
    are removed."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)
