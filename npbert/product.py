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
gamma(k) = k u / (1 - k u), u = 2^-53; the right side by Cauchy-Schwarz, |.| the 2-norm). Where
both ends of [result - bound, result + bound] round to the same float32, so does every number
between them, the exact value included. Elsewhere, near a point halfway between two float32
values (about one value in a million on real checkpoints), the sum is done exactly instead.
"""

import math

import numpy as np

# gamma(k) as a multiple of k u, doubled: the margin covers the rounding of the norms, of the
# bound itself and of result +- bound, each a few u relative to the bound's terms.
MARGIN = 2.0
ROWS = 256  # rows of float64 scratch at a time: (ROWS, H) stays in cache


def rounded_product(
    x: np.ndarray, weight64: np.ndarray, bias: np.ndarray | None, out: np.ndarray
) -> None:
    """out = x @ weight.T + bias, each value the exact one rounded to float32: x (n, E)
    float32, weight64 (H, E) the float32 weight as float64 (float64_weight), bias (H,) float32
    or None, out (n, H) float32."""
    terms = weight64.shape[1] + (bias is not None)
    slack = MARGIN * terms * 2.0**-53 / (1 - terms * 2.0**-53)  # gamma(E + 1), with margin
    weight_norms = np.sqrt(np.vecdot(weight64, weight64))  # (H,)
    largest = np.max(weight_norms, initial=0.0)  # the bound below takes the largest row's
    bias64 = None if bias is None else bias.astype(np.float64)  # (H,)
    shift = 0.0 if bias is None else float(np.abs(bias64).max(initial=0.0))
    for start in range(0, len(x), ROWS):
        rows = x[start : start + ROWS].astype(np.float64)  # (m, E)
        wide = rows @ weight64.T  # (m, H), within the bound of the exact value
        if bias64 is not None:
            wide += bias64
        radius = slack * (np.sqrt(np.vecdot(rows, rows)) * largest + shift)  # (m,)
        block = out[start : start + ROWS]  # (m, H)
        block[...] = wide
        low = (wide - radius[:, None]).astype(np.float32)  # (m, H)
        high = (wide + radius[:, None]).astype(np.float32)  # (m, H)
        for i, h in zip(*np.nonzero(low != high), strict=True):  # near a halfway point
            block[i, h] = nearest_float32(rows[i] * weight64[h], bias64, h)


def nearest_float32(products: np.ndarray, bias64: np.ndarray | None, h: int) -> np.float32:
    """The float32 nearest the exact sum of products (E,) float64 (+ bias64[h]), ties to even.

    math.fsum rounds the exact sum once, to float64; rounding that again to float32 errs only
    where it lands exactly halfway between two float32 values: the sign of what fsum left out
    (itself exact in sign) then says which way the exact sum lies."""
    terms = [*products, *([] if bias64 is None else [bias64[h]])]
    total = math.fsum(terms)  # the exact sum, rounded to float64
    nearest = np.float32(total)
    if float(nearest) == total or not math.isfinite(total):
        return nearest
    other = np.nextafter(nearest, np.float32(math.copysign(math.inf, total - float(nearest))))
    if (float(nearest) + float(other)) / 2 != total:  # not halfway: rounded once, rightly
        return nearest
    left_out = math.fsum([*terms, -total])  # the exact sum minus total, of the exact sign
    if left_out == 0:
        return nearest  # a true tie: to even, as np.float32 rounds it
    return max(nearest, other) if left_out > 0 else min(nearest, other)


def float64_weight(weight: np.ndarray) -> np.ndarray:
    """A float32 weight (H, E) as float64, exactly, for rounded_product."""
    return weight.astype(np.float64)
