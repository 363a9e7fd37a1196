"""The fast path's passes over a block of rows, in place: centering, and the LayerNorm of centered
rows with gamma and beta.
"""

import math

import numpy as np

# Gamma and beta multiply and add to a block's rows in groups of SHORT, seen as (n / SHORT,
# SHORT * E), with SHORT copies of each seen as one row, (1, SHORT * E): as fast a pass as a
# same-shape operand, where NumPy runs a broadcast (E,) row about half as fast, in 96 KiB of
# cache for both at bert-base's 768.
SHORT = 16


PAGE = 4096  # bytes


def center(x: np.ndarray, scale: float, stats: np.ndarray) -> None:
    """Rows of x (n, E) minus their mean, in place, after BigBird's scale; the same float32
    operations as precompute makes Wc with, so a row comes out the same either way."""
    if scale != 1.0:
        x *= np.float32(scale)
    mean = np.add.reduce(x, axis=-1, out=stats)  # (n,)
    mean /= np.float32(x.shape[-1])
    x -= mean[:, None]


def normalize_centered(x: np.ndarray, eps, affine: tuple, stats: np.ndarray) -> None:
    """LayerNorm of rows x (n, width) already centered (by Wc and Rc, or center), in place, gamma
    and beta included: x / sqrt(mean(x^2) + eps) * gamma + beta, gamma and beta as
    affine_rows gives them."""
    n = len(x)
    scale = np.vecdot(x, x, out=stats)  # (n,) sums of squares
    scale /= np.float32(x.shape[-1])  # variance
    scale += eps
    x /= np.sqrt(scale, out=scale)[:, None]  # normalized: dividing rounds once, where
    # multiplying by 1 / std rounds twice (median float32 ULPs from float64: 0.59 dividing,
    # 0.64 multiplying)
    gamma, beta, gamma_rows, beta_rows = affine
    whole = n - n % SHORT  # rows in groups of SHORT
    if whole:  # the same products and sums, elementwise, on a view
        groups = x[:whole].reshape(whole // SHORT, -1)  # (n / SHORT, SHORT * E)
        groups *= gamma_rows
        if beta is not None:
            groups += beta_rows
    if whole < n:
        rest = x[whole:]  # (n % SHORT, E)
        rest *= gamma
        if beta is not None:
            rest += beta


def empty(shape: tuple[int, ...], like: np.ndarray) -> np.ndarray:
    """np.empty(shape, float32) at the same offset within a 4 KiB page as `like`'s data.

    For the output of the word lookup. A copy runs up to twice as slow when the array it
    writes starts a few bytes past the one it reads, modulo 4 KiB: the CPU holds back loads
    that look like reads of the stores just made (4K aliasing). At the table's own offset,
    every row is written a whole number of rows from where it is read.
    """
    nbytes = math.prod(shape) * 4
    buffer = np.empty(nbytes + PAGE, np.uint8)
    start = (like.ctypes.data - buffer.ctypes.data) % PAGE
    return buffer[start : start + nbytes].view(np.float32).reshape(shape)
