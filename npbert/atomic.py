"""Writing files and directories so that an interrupted run never leaves a partial one: build
under a temporary name beside the target, then rename into place (atomic on one filesystem)."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomically(path: Path, write) -> None:
    """write(file object) to a temporary file beside `path`, then rename it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def building_directory(target: Path) -> Iterator[Path]:
    """A temporary directory beside `target`, renamed to it when the block completes and
    removed when it does not."""
    building = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        yield building
        building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
