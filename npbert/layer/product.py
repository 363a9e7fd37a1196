"""A matrix product whose every value is the float32 nearest the exact one.

    out = x @ weight.T + bias       x (n, E), weight (H, E), bias (H,) or None; float32 all

Each value of `out` is the exact value of its row's product rounded once to float32 (ties to
even): a function of that row and the weights alone. A float32 product from BLAS is not: the
order in which it sums E terms depends on the matrix shapes (so on the other rows of the
batch), on the kernel chosen for the CPU and on BLAS's threads, and a row's bits with them.

How, at the cost of one float64 product: a float32 times a float32 is exact in float64 (24 + 24
significant bits < 53), so whatever order BLAS sums the float64 terms in, its result lies
within

    bound = gamma(E + 1) * (sum_e |x_e * w_e| + |b|) <= gamma(E + 1) * (|x| * |w| + |b|)

of the exact value (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5;
gamma(k) = k u / (1 - k u), u = 2^-53; the right side by Cauchy-Schwarz over (x, 1) and
(w, b), |.| the 2-norm). Where both ends of [result - bound, result + bound] round to the same
float32, so does every number between them, the exact value included. Elsewhere, near a point
halfway between two float32 values, math.fsum sums the terms exactly. That is rare, as the
bound, about 2 E 2^-53 of the norms, is far below float32's step, 2^-23 of the value; it grows
with E, and so does the share of values summed exactly.
"""

import math

import numpy as np

# gamma(k) as a multiple of k u, doubled: the margin covers the rounding of the norms, of the
# bound itself and of result +- bound, each a few u relative to the bound's terms.
MARGIN = 2.0
ROWS = 512  # rows at a time: fewer run BLAS's product slower, more take more scratch


def wide_weight(weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """[weight | bias] (H, E + 1) float64, exactly, for rounded_product: weight (H, E) and
    bias (H,) float32, the bias as the weight of an input that is always 1 (0 for none)."""
    wide = np.zeros((weight.shape[0], weight.shape[1] + 1))
    wide[:, :-1] = weight
    if bias is not None:
        wide[:, -1] = bias
    return wide


def rounded_product(x: np.ndarray, weight: np.ndarray, out: np.ndarray) -> None:
    """out = x @ W.T + b, each value the exact one rounded once to float32: x (n, E) float32,
    weight (H, E + 1) float64 as wide_weight makes it of W and b, out (n, H) float32."""
    terms = weight.shape[1]  # E + 1
    slack = MARGIN * terms * 2.0**-53 / (1 - terms * 2.0**-53)  # gamma(E + 1), with margin
    largest = math.sqrt(np.vecdot(weight, weight).max(initial=0.0))  # of any |(w_h, b_h)|
    size = min(ROWS, len(x))
    rows = np.ones((size, terms))  # [x | 1], (ROWS, E + 1)
    wide = np.empty((size, weight.shape[0]))  # (ROWS, H)
    high = np.empty(wide.shape, np.float32)  # (ROWS, H)
    for start in range(0, len(x), ROWS):
        n = min(ROWS, len(x) - start)
        rows[:n, :-1] = x[start : start + n]
        np.matmul(rows[:n], weight.T, out=wide[:n])  # within radius of the exact values
        # the largest row's radius for the block: a scalar runs twice as fast as a column
        radius = slack * largest * math.sqrt(np.vecdot(rows[:n], rows[:n]).max())
        low = out[start : start + n]  # (n, H): the result where it is high's
        with np.errstate(over="ignore"):  # past float32's range: inf, as it rounds to
            np.subtract(wide[:n], radius, out=low, casting="same_kind")  # rounded to float32
            np.add(wide[:n], radius, out=high[:n], casting="same_kind")
        unsure = np.flatnonzero(low != high[:n])  # near a halfway point: summed exactly
        if len(unsure):
            i, h = np.divmod(unsure, wide.shape[1])
            low[i, h] = nearest_float32(rows[i] * weight[h])  # each product exact


def nearest_float32(terms: np.ndarray) -> np.ndarray:
    """The float32 nearest the exact sum of each row of terms (k, E) float64, ties to even.

    math.fsum rounds the exact sum once, to float64; rounding that again to float32 errs only
    where it lands exactly halfway between two float32 values: the sign of what fsum left out
    (itself exact in sign) then says which way the exact sum lies."""
    each = terms.tolist()
    totals = np.array([math.fsum(row) for row in each])  # (k,) the exact sums, in float64
    nearest = totals.astype(np.float32)  # (k,)
    toward = np.where(totals > nearest, np.float32(np.inf), np.float32(-np.inf))  # (k,)
    other = np.nextafter(nearest, toward)  # (k,) the float32 on totals' other side
    with np.errstate(over="ignore", invalid="ignore"):  # sums past float32's range
        halfway = (nearest != totals) & ((nearest.astype(float) + other) / 2 == totals)
    for k in np.flatnonzero(halfway):
        left_out = math.fsum([*each[k], -totals[k]])  # the exact sum minus total, exact sign
        if left_out != 0:  # not a true tie, which rounds to even as astype does
            pick = max if left_out > 0 else min
            nearest[k] = pick(nearest[k], other[k])
    return nearest
