"""npbert.layer.product: every value of a projection is the exact product rounded once to float32,
checked against exact rational arithmetic, so a row's bits cannot depend on its batch or on
BLAS."""

from fractions import Fraction

import numpy as np
import pytest

from npbert.layer.product import rounded_product, wide_weight


def nearest_float32(exact: Fraction) -> np.float32:
    """The float32 nearest a rational number, ties to the even significand: the oracle."""
    guess = np.float32(float(exact))
    candidates = {guess, np.nextafter(guess, np.float32(np.inf)),
                  np.nextafter(guess, np.float32(-np.inf))}  # fmt: skip
    distance = {c: abs(Fraction(float(c)) - exact) for c in candidates}
    best = min(distance.values())
    tied = sorted((c for c in candidates if distance[c] == best), key=float)
    return tied[0] if len(tied) == 1 else next(c for c in tied if c.view(np.int32) % 2 == 0)


def exactly_rounded(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x @ weight.T + bias in exact arithmetic, each value rounded once to float32."""
    out = np.empty((len(x), len(weight)), np.float32)
    for i, h in np.ndindex(out.shape):
        pairs = zip(x[i], weight[h], strict=True)
        exact = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in pairs)
        out[i, h] = nearest_float32(exact + (0 if bias is None else Fraction(float(bias[h]))))
    return out


def product(x, weight, bias=None) -> np.ndarray:
    out = np.empty((len(x), len(weight)), np.float32)
    rounded_product(x, wide_weight(weight, bias), out)
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("biased", [False, True])
def test_every_value_is_the_exact_product_rounded_once(seed, biased):
    rng = np.random.default_rng(seed)
    width = (1, 7, 64)[seed]
    x = rng.normal(0, 3, (9, width)).astype(np.float32)
    weight = rng.normal(0, 0.05, (11, width)).astype(np.float32)
    bias = rng.normal(0, 1, 11).astype(np.float32) if biased else None
    np.testing.assert_array_equal(product(x, weight, bias), exactly_rounded(x, weight, bias))


# Sums that lie exactly halfway between two float32 values, or a hair beside such a point,
# closer than float64 can tell: rounding the float64 sum to float32 gets some of them wrong.
ONE = 1.0
STEP = 2.0**-23  # float32's step at 1
HAIR = 2.0**-80  # a float32, far below float64's step at 1


@pytest.mark.parametrize(
    "terms",
    [
        [ONE, STEP / 2],  # halfway between 1 and 1 + STEP: to the even, 1
        [ONE + STEP, STEP / 2],  # halfway, the even is above: 1 + 2 STEP
        [ONE, STEP / 2, HAIR],  # a hair above halfway: up, where float64's sum says halfway
        [ONE + STEP, STEP / 2, -HAIR],  # a hair below halfway: down
        [-ONE, -STEP / 2, -HAIR],
        [ONE, -STEP / 4, HAIR],  # nowhere near halfway
    ],
)
def test_sums_at_and_beside_halfway_points_round_to_the_nearest(terms):
    x = np.array([terms], np.float32)
    assert [float(t) for t in x[0]] == terms  # each term is a float32, as given
    weight = np.ones((1, len(terms)), np.float32)
    np.testing.assert_array_equal(product(x, weight), exactly_rounded(x, weight, None))


def test_a_row_comes_out_the_same_alone_and_in_any_batch():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 5, (600, 128)).astype(np.float32)  # past one block of scratch rows
    weight = rng.normal(0, 0.1, (256, 128)).astype(np.float32)
    bias = rng.normal(0, 1, 256).astype(np.float32)
    together = product(x, weight, bias)
    for rows in ([0], [1, 2], slice(3, 300), slice(299, 600)):
        np.testing.assert_array_equal(product(x[rows], weight, bias), together[rows])


def test_a_sum_past_float32s_range_rounds_to_infinity_as_float32_does():
    x = np.array([[3e38, 3e38]], np.float32)
    weight = np.array([[10.0, -1.0], [1.0, 0.0]], np.float32)
    exact = [float(x[0, 0]) * 10 - float(x[0, 1]), float(x[0, 0])]
    with np.errstate(over="ignore"):
        rounded = np.array(exact).astype(np.float32)  # (inf, 3e38)
    np.testing.assert_array_equal(product(x, weight)[0], rounded)
