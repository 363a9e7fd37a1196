"""The promise of npbert.embed, checked under whatever BLAS kernel and thread count this process
has: a sequence comes out the same, bit for bit, alone as in a batch of any size, in blocks of
any size, on any number of threads; projected too. tests/test_kernels.py runs this script under
several forced OpenBLAS kernels (OPENBLAS_CORETYPE) and BLAS thread counts, and compares the
digests it prints last: every output's, the same under any BLAS thread count; and of products
alone, the same under any kernel too (npbert.layer.product: the exact value, rounded once).

    python tests/invariance.py      # prints what differs and exits 1; then the two digests
"""

import hashlib
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np
from conftest import DATA, widened

import npbert
from npbert.layer import fast
from npbert.layer.product import rounded_product, wide_weight

BATCHES = (2, 5, 24)
BLOCKS = (fast.BLOCK, 16)  # as tuned, and small enough to cut sequences into pieces


def checkpoints(scratch: Path) -> dict:
    """Every tiny checkpoint, and ELECTRA and DeBERTa-v2 at ELECTRA-small's widths (E 128 ->
    H 256: projections of a realistic length)."""
    found = {path.name: npbert.load_weights(path) for path in sorted(DATA.glob("tiny-*"))}
    for name in ("tiny-electra", "tiny-deberta-v2"):
        (scratch / name).mkdir()
        found[f"{name} at 128 -> 256"] = widened(scratch / name, name, 128, 256)
    return found


def differences(weights, digest) -> list[str]:
    """Where a sequence embedded in a batch differs from the same sequence alone; the outputs
    go into the digest."""
    project = weights.config.projection == "after"
    ids = np.random.default_rng(0).integers(5, weights.config.vocab_size, (max(BATCHES), 7))
    alone = np.stack([npbert.embed(weights, row, project=project) for row in ids])
    digest.update(alone.tobytes())
    found = []
    for batch, block, threads in itertools.product(BATCHES, BLOCKS, (1, 2)):
        fast.BLOCK = block
        together = npbert.embed(weights, ids[:batch], project=project, threads=threads)
        bad = together != alone[:batch]
        if bad.any():
            worst = np.abs(together - alone[:batch]).max()
            found.append(f"batch {batch}, blocks of {block}, {threads} threads: "
                         f"{bad.sum()} values differ, max {worst:.3g}")  # fmt: skip
    fast.BLOCK = BLOCKS[0]
    return found


def products_digest() -> str:
    """The digest of rounded_product's values on random matrices of several shapes."""
    digest, rng = hashlib.sha256(), np.random.default_rng(0)
    for rows, width, hidden in ((1, 128, 256), (7, 128, 256), (300, 128, 768), (33, 1024, 64)):
        x = rng.normal(0, 3, (rows, width)).astype(np.float32)
        weight = rng.normal(0, 0.1, (hidden, width)).astype(np.float32)
        out = np.empty((rows, hidden), np.float32)
        bias = rng.normal(0, 1, hidden).astype(np.float32)
        rounded_product(x, wide_weight(weight, bias), out)
        digest.update(out.tobytes())
    return digest.hexdigest()


def main() -> int:
    outputs = hashlib.sha256()
    with tempfile.TemporaryDirectory() as scratch:
        found = {name: differences(w, outputs) for name, w in checkpoints(Path(scratch)).items()}
    failures = {name: where for name, where in found.items() if where}
    for name, where in failures.items():
        print(f"{name}: " + "; ".join(where))
    print(f"outputs {outputs.hexdigest()}")
    print(f"products {products_digest()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
