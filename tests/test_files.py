"""Files npbert writes: modes follow the umask, and the temporaries of a killed run are
removed by the next one, never anything else (npbert.atomic)."""

import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest
from conftest import TINY

from npbert.atomic import building_directory, write_atomically
from npbert.cli import main

# A child that starts writing `target` atomically, says so, and then waits to be killed.
WRITER = """
import sys, time
from pathlib import Path
from npbert.atomic import write_atomically

def write(f):
    f.write(b"half a file")
    f.flush()
    print("writing", flush=True)
    time.sleep(60)

write_atomically(Path(sys.argv[1]), write)
"""


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Set the process's umask for one test, then restore it."""
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_written_files_and_directories_follow_the_umask(tmp_path, umask, mask):
    umask(mask)
    write_atomically(tmp_path / "f.bin", lambda f: f.write(b"x"))
    with building_directory(tmp_path / "d") as building:
        (building / "inside").write_bytes(b"x")
    assert mode(tmp_path / "f.bin") == 0o666 & ~mask
    assert mode(tmp_path / "d") == 0o777 & ~mask
    assert mode(tmp_path / "d" / "inside") == 0o666 & ~mask


def test_cli_outputs_follow_the_umask(tmp_path, umask, capsys):
    umask(0o022)
    out = tmp_path / "out.npy"
    out.write_bytes(b"an older result")
    os.chmod(out, 0o644)
    assert main(["embed", "i am", "--model", str(TINY), "--out", str(out)]) == 0
    assert mode(out) == 0o644  # was 0600 after mkstemp, whatever the umask
    umask(0o027)
    assert main(["embed", "i am", "--model", str(TINY), "--out", str(tmp_path / "new.npz")]) == 0
    assert main(["vectors", "--model", str(TINY), "--out", str(tmp_path / "vectors")]) == 0
    assert mode(tmp_path / "new.npz") == 0o640
    assert mode(tmp_path / "vectors") == 0o750
    assert mode(tmp_path / "vectors" / "manifest.json") == 0o640


def start_writer(target):
    """A process in the middle of writing `target`; returns it once it is writing."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline() == "writing\n"  # EOF, not a hang, if the child fails
    return child


def hidden(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith(".")}


def test_the_next_run_removes_what_a_killed_run_left(tmp_path, capsys):
    out = tmp_path / "out.npy"
    killed = start_writer(out)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    left = hidden(tmp_path)
    assert len(left) == 1 and not out.exists()  # the kill left a hidden temporary
    others = [
        ".out.npy.backup.tmp",  # not npbert's naming
        ".out.npy.npbert-notahex.tmp",
        ".out.npy.npbert-0123abcd.tmp.keep",
        ".other.npy.npbert-0123abcd.tmp",  # another target's
        "out.npy.npbert-0123abcd.tmp",  # not hidden
    ]
    for name in others:
        (tmp_path / name).write_bytes(b"someone else's")
    live = start_writer(out)  # another run, writing the same target right now
    try:
        writing = hidden(tmp_path) - left - set(others)
        assert main(["embed", "i am", "--model", str(TINY), "--out", str(out)]) == 0
        assert hidden(tmp_path) == writing | {n for n in others if n.startswith(".")}
    finally:
        live.kill()
        live.wait(timeout=30)
    assert np.load(out).shape[-1] == 32
    assert main(["embed", "i am", "--model", str(TINY), "--out", str(out)]) == 0
    assert hidden(tmp_path) == {n for n in others if n.startswith(".")}  # the second one, too
    assert all((tmp_path / name).read_bytes() == b"someone else's" for name in others)


def test_a_killed_vectors_run_is_cleaned_up_too(tmp_path, capsys):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from npbert.atomic import building_directory\n"
            "with building_directory(Path(sys.argv[1])) as d:\n"
            "    (d / 'half').write_bytes(b'x'); print('writing', flush=True); time.sleep(60)\n",
            str(tmp_path / "vectors"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "writing\n"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert len(hidden(tmp_path)) == 1
    assert main(["vectors", "--model", str(TINY), "--out", str(tmp_path / "vectors")]) == 0
    assert hidden(tmp_path) == set()


def test_a_failed_write_leaves_nothing(tmp_path):
    def fail(f):
        f.write(b"half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_atomically(tmp_path / "out.npy", fail)
    assert list(tmp_path.iterdir()) == []


def test_stale_names_that_are_links_or_fifos_are_removed_without_following(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_bytes(b"not npbert's")
    os.symlink(tmp_path / "elsewhere", tmp_path / ".out.npy.npbert-0123abcd.tmp")
    os.mkfifo(tmp_path / ".out.npy.npbert-89abcdef.tmp")  # opening it must not wait
    write_atomically(tmp_path / "out.npy", lambda f: f.write(b"x"))
    assert hidden(tmp_path) == set()
    assert (tmp_path / "elsewhere" / "keep").read_bytes() == b"not npbert's"


@pytest.mark.parametrize(
    "error",
    [
        OSError("4224 requested and 3568 written"),  # NumPy's short write: no errno, no file
        OSError(28, "No space left on device"),
    ],
)
def test_a_failed_write_names_the_file_asked_for(tmp_path, error):
    def fail(f):
        raise error

    with pytest.raises(OSError) as caught:
        write_atomically(tmp_path / "out.npy", fail)
    assert caught.value.filename == str(tmp_path / "out.npy")
    assert caught.value.strerror.startswith(error.strerror or str(error))
    assert ("a short write" in caught.value.strerror) == (error.errno is None)
    with pytest.raises(OSError) as caught, building_directory(tmp_path / "d") as building:
        (building / "ok.npy").write_bytes(b"x")
        raise error
    assert caught.value.filename == str(tmp_path / "d")  # not the temporary directory
    assert list(tmp_path.iterdir()) == []


class HTTPError(OSError):
    """As requests' HTTPError: an OSError without errno, which npbert.loading.hub turns to words."""


def test_an_error_that_is_not_a_files_passes_through_unnamed(tmp_path):
    error = HTTPError("503 Server Error")
    with pytest.raises(HTTPError) as caught, building_directory(tmp_path / "d"):
        raise error
    assert caught.value is error
