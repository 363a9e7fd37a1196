"""npbert's invariance under BLAS kernels other than this CPU's: tests/invariance.py run in
subprocesses under forced OpenBLAS kernels (OPENBLAS_CORETYPE) and 1 and 2 BLAS threads, so
that a machine with AVX-512 sees what one with AVX2 alone would, and the reverse where it can.
A kernel this CPU cannot run (an illegal instruction) is skipped, and the skip says so."""

import os
import signal
import subprocess
import sys
from functools import cache

import numpy as np
import pytest
from conftest import TESTS

# Kernels any x86-64 with AVX2 runs, and SkylakeX (AVX-512), run where the CPU has it.
# "default" is the one OpenBLAS picks for this CPU.
KERNELS = ("default", "Haswell", "Sandybridge", "Prescott", "SkylakeX")
THREADS = (1, 2)
TIMEOUT = 300  # seconds a run may take: tests/invariance.py takes a few


def openblas() -> bool:
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return "openblas" in blas["name"].lower()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(kernel, threads): tests/invariance.py under that kernel and thread count, once each;
    its temporary files in pytest's directory, as a run the CPU kills (SIGILL) leaves them."""
    scratch = tmp_path_factory.mktemp("invariance")

    @cache
    def run(kernel: str, threads: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OPENBLAS_VERBOSE": "2"}
        env.pop("OPENBLAS_CORETYPE", None)
        if kernel != "default":
            env["OPENBLAS_CORETYPE"] = kernel
        return subprocess.run(
            [sys.executable, str(TESTS / "invariance.py")],
            env={**env, "TMPDIR": str(scratch)},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    return run


def digests(result: subprocess.CompletedProcess) -> dict[str, str]:
    lines = (line.split() for line in result.stdout.splitlines())
    return {words[0]: words[1] for words in lines if len(words) == 2 and len(words[1]) == 64}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or not openblas(), reason="needs NumPy's OpenBLAS")
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_sequence_is_the_same_in_any_batch_under_every_blas_kernel(run, kernel):
    results = [run(kernel, threads) for threads in THREADS]
    if any(r.returncode == -signal.SIGILL for r in results):
        pytest.skip(f"this CPU cannot run OpenBLAS's {kernel} kernel (illegal instruction)")
    for threads, result in zip(THREADS, results, strict=True):
        said = result.stdout + result.stderr
        assert result.returncode == 0, f"{kernel}, {threads} BLAS threads:\n{said}"
        assert kernel == "default" or "Core: " in said, said  # OpenBLAS took the kernel
    one, two = (digests(r) for r in results)
    assert one == two, f"{kernel}: 1 and 2 BLAS threads gave other outputs"
    # a product is the exact one rounded once: the same bits under every kernel
    assert one["products"] == digests(run("default", 1))["products"], kernel
