"""Learned or sinusoidal? A model's position table against the sinusoids of the same shape.

The original Transformer adds fixed sinusoids to its inputs; BERT learns its position table
(P, H) with the rest of the model. This module measures how a table relates to the
sinusoidal table of the same shape, with pure functions over plain arrays:

- how much of it the sinusoids explain (least-squares fit, R^2 overall and per dimension),
  beside the same figure for a seeded random table of the same shape and scale;
- how alike positions are (cosine similarity, P x P) and how that falls with distance;
- each dimension's dominant frequency over positions (FFT) against the sinusoid's;
- the norm of each position's row: the first, the last, and past a pre-training length.

`analyse` returns every figure as a JSON-able dict with stable keys, `format_report` prints
it. Shapes: P positions, H dimensions. Everything is computed in float64.

This module imports nothing but NumPy at module level.
"""

import numpy as np

from npbert.analysis.positions_report import reading
from npbert.layer.embedding import SINUSOID_BASE, sinusoidal_table

# BERT pre-trained 90% of its steps on sequences of 128 tokens and the last 10% on 512, "to
# learn the positional embeddings" (BERT paper, appendix A.2): rows past 128 saw less training.
DEFAULT_PRETRAINING_LENGTH = 128


RANDOM_SEED = 0  # of the random baseline table


# The sinusoid basis keeps the directions of the sinusoidal table whose singular value is at
# least this fraction of the largest (see sinusoid_basis).
BASIS_RCOND = 1e-6


# The verdict: the sinusoids explain at least this share of the table's variance (adjusted R^2)
# ... and at least this share of its dimensions peak at their sinusoid's frequency.
SINUSOIDAL_R2 = 0.99


SINUSOIDAL_FREQUENCY_SHARE = 0.9


LARGEST_ROWS = 4  # positions listed with the largest row norms


def sinusoid_frequency_bins(num_positions: int, hidden_size: int) -> np.ndarray:
    """(H,) int: the FFT bin over P positions nearest each sinusoid's frequency, in 1..P//2.

    Dimension j turns by 1 / 10000^(2i/H) radians per position (i = j // 2), that is
    P / (2 pi 10000^(2i/H)) cycles over the table. A sinusoid slower than one cycle over the
    table peaks in bin 1 once its mean is removed, as does every slow trend.
    """
    j = np.arange(hidden_size)
    cycles = num_positions / (2 * np.pi * np.power(SINUSOID_BASE, 2 * (j // 2) / hidden_size))
    return np.clip(np.rint(cycles), 1, num_positions // 2).astype(np.int64)


def sinusoid_basis(num_positions: int, hidden_size: int) -> np.ndarray:
    """(P, k) float64 orthonormal columns spanning the mean-removed sinusoidal table's columns.

    The fit of a table by "the sinusoid basis" is the regression of each of its columns on all
    H sinusoid columns plus a constant; removing every column's mean does the constant's work.
    Counted naively that is H + 1 regressors per column, which for bert-base (P = 512
    positions, H = 768) is more than there are positions: no degree of freedom would be left,
    every table would fit, random numbers too, and R^2 would say nothing. But over P positions
    the sinusoids are far from independent (the slow ones are nearly the same few smooth
    curves), so the basis is their numerical span: the left singular vectors whose singular
    value is at least BASIS_RCOND of the largest. Measured: k = 106 for 512 x 384, 147 for
    512 x 768, 17 for 128 x 32. The sinusoidal table itself still fits with R^2 above
    1 - 1e-12 at every shape the tests try, and k, the degrees of freedom the fit really has,
    is what the adjusted R^2 (adjusted_r2) corrects for: random numbers get R^2 ~ k / (P - 1)
    on any k directions by chance, adjusted ~ 0.

    Any threshold gives an honest adjusted figure; a smaller one only adds directions that the
    sinusoids barely hold, which fit random numbers by chance and nothing else. On
    all-MiniLM-L6-v2 thresholds from 1e-3 to 1e-10 (k from 102 to 110) move its adjusted R^2
    between 0.626 and 0.670.
    """
    table = sinusoidal_table(num_positions, hidden_size)
    u, s, _ = np.linalg.svd(table - table.mean(axis=0), full_matrices=False)
    return u[:, s > BASIS_RCOND * s[0]]


def adjusted_r2(r2, num_positions: int, rank: int):
    """R^2 corrected for the fit's degrees of freedom: 1 - (1 - R^2) (P - 1) / (P - k - 1).

    Random numbers regressed on k directions get R^2 of about k / (P - 1) by chance alone; the
    adjusted figure is about 0 for them and equals R^2 for a perfect fit. None when k >= P - 1:
    then every table is fit exactly and the fit says nothing.
    """
    if num_positions - rank - 1 <= 0:
        return None
    return 1 - (1 - r2) * (num_positions - 1) / (num_positions - rank - 1)


def sinusoid_fit(table: np.ndarray, basis: np.ndarray) -> dict:
    """Least-squares fit of each column of table (P, H) by basis (P, k) plus a constant.

    Returns r2 (the share of the table's variance about each dimension's mean that the fit
    explains, over all dimensions), r2_adjusted (for the k degrees of freedom, see adjusted_r2)
    and per_dimension: the adjusted R^2 of each column, its median and 10th and 90th
    percentiles (None where the adjustment is undefined). A column without variance is fit
    exactly by the constant: R^2 1.
    """
    num_positions, rank = table.shape[0], basis.shape[1]
    centered = table - table.mean(axis=0)
    residual = centered - basis @ (basis.T @ centered)
    total, left = (centered**2).sum(axis=0), (residual**2).sum(axis=0)  # (H,) each
    per_dimension = 1 - np.divide(left, total, out=np.zeros_like(total), where=total > 0)
    r2 = 1 - left.sum() / total.sum()
    adjusted = adjusted_r2(per_dimension, num_positions, rank)
    return {
        "r2": float(r2),
        "r2_adjusted": _float(adjusted_r2(r2, num_positions, rank)),
        "per_dimension": {
            "median": _float(None if adjusted is None else np.median(adjusted)),
            "p10": _float(None if adjusted is None else np.percentile(adjusted, 10)),
            "p90": _float(None if adjusted is None else np.percentile(adjusted, 90)),
            "values": None if adjusted is None else adjusted.tolist(),
        },
    }


def random_table(table: np.ndarray, seed: int = RANDOM_SEED) -> np.ndarray:
    """The baseline: normal numbers (P, H) float64 with the table's shape, mean and std."""
    return np.random.default_rng(seed).normal(table.mean(), table.std(), table.shape)


def cosine_similarity(table: np.ndarray) -> np.ndarray:
    """(P, P) float64: the cosine between every two rows of table (P, H); 0 with a zero row."""
    norms = np.linalg.norm(table, axis=1)
    unit = table / np.where(norms > 0, norms, 1.0)[:, None]
    return unit @ unit.T


def similarity_by_distance(similarity: np.ndarray) -> np.ndarray:
    """(P,) float64: the mean of similarity (P, P) over position pairs d apart, d = 0..P-1."""
    return np.array([np.diagonal(similarity, d).mean() for d in range(similarity.shape[0])])


def dominant_frequency_bins(table: np.ndarray) -> np.ndarray:
    """(H,) int: for each column of table (P, H), its strongest FFT bin over positions, 1..P//2.

    Bin b is b cycles over the P positions (b / P cycles a position); the mean (bin 0) is
    left out.
    """
    power = np.abs(np.fft.rfft(table - table.mean(axis=0), axis=0)) ** 2  # (P//2 + 1, H)
    return 1 + np.argmax(power[1 : table.shape[0] // 2 + 1], axis=0)


def row_norms(table: np.ndarray) -> np.ndarray:
    """(P,) float64: the Euclidean norm of each position's row of table (P, H)."""
    return np.linalg.norm(table, axis=1)


def table_figures(table: np.ndarray, basis: np.ndarray, pretraining_length: int) -> dict:
    """Every figure of one table (P, H), against the sinusoid basis (P, k): fit, frequency,
    similarity, norms. The keys are the same for every table."""
    return {
        "fit": sinusoid_fit(table, basis),
        "frequency": frequency_figures(table),
        "similarity": similarity_figures(table),
        "norms": norm_figures(table, pretraining_length),
    }


def frequency_figures(table: np.ndarray) -> dict:
    """Each column's dominant frequency over positions, against its sinusoid's: table (P, H)."""
    num_positions, hidden_size = table.shape
    bins = dominant_frequency_bins(table)
    expected = sinusoid_frequency_bins(num_positions, hidden_size)
    return {
        "at_sinusoid_frequency": float(np.mean(np.abs(bins - expected) <= 1)),
        # the fastest sinusoid turns one radian a position (a period of 2 pi positions): what
        # varies faster is out of the sinusoids' reach
        "faster_than_sinusoids": float(np.mean(bins > expected.max() + 1)),
        "median_period": float(np.median(num_positions / bins)),
        "dominant_frequency": (bins / num_positions).tolist(),
    }


def similarity_figures(table: np.ndarray) -> dict:
    """The cosine between positions of table (P, H) by distance: between neighbours, on average
    P/2 or more apart ("far"), at distances 1, 2, 4, ... and at every distance 0..P-1."""
    num_positions = table.shape[0]
    by_distance = similarity_by_distance(cosine_similarity(table))
    powers_of_two = 2 ** np.arange(num_positions.bit_length() - 1)  # 1, 2, 4, ... < P
    return {
        "neighbour": float(by_distance[1]),
        "far": float(by_distance[num_positions // 2 :].mean()),
        "at_distance": [[int(d), float(by_distance[d])] for d in powers_of_two],
        "by_distance": by_distance.tolist(),
    }


def norm_figures(table: np.ndarray, pretraining_length: int) -> dict:
    """Row norms of table (P, H): the first, the last, the largest, and within and past the
    first pretraining_length positions (mean_past_pretraining None if there are none past)."""
    norms = row_norms(table)
    within, past = norms[:pretraining_length], norms[pretraining_length:]
    largest = np.argsort(-norms, kind="stable")[:LARGEST_ROWS]
    return {
        "first": float(norms[0]),
        "last": float(norms[-1]),
        "median": float(np.median(norms)),
        "mean_within_pretraining": float(within.mean()),
        "mean_past_pretraining": _float(past.mean() if past.size else None),
        "last_within_pretraining": float(within[-1]),
        "largest": [[int(p), float(norms[p])] for p in largest],
        "by_position": norms.tolist(),
    }


def check_table(table) -> np.ndarray:
    """table as (P, H) float64, or npbert.InputError naming what is wrong with it."""
    from npbert.errors import InputError

    array = np.asarray(table, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 2 or array.shape[1] < 1:
        raise InputError(f"a position table is (positions >= 2, dims >= 1), not {array.shape}")
    if not np.isfinite(array).all():
        raise InputError(f"the position table has {np.sum(~np.isfinite(array))} non-finite values")
    if np.ptp(array, axis=0).max() == 0:
        raise InputError("the position table is the same at every position: nothing to compare")
    return array


def check_length(pretraining_length: int | None, num_positions: int) -> int:
    """The pre-training length: the one given, from 1 to the table's rows, or by default
    DEFAULT_PRETRAINING_LENGTH (every row of a shorter table)."""
    if pretraining_length is None:
        return min(DEFAULT_PRETRAINING_LENGTH, num_positions)
    if not 1 <= pretraining_length <= num_positions:
        from npbert.errors import InputError

        raise InputError(
            f"the pre-training length must be from 1 to the table's {num_positions} rows, not "
            f"{pretraining_length}"
        )
    return pretraining_length


def analyse(table, *, pretraining_length: int | None = None, seed: int = RANDOM_SEED) -> dict:
    """Every figure, JSON-able: the table (P, H) against the sinusoidal table of the same shape
    and a random table (seed) of the same shape and scale, each under tables.model,
    tables.sinusoidal, tables.random with the keys of table_figures; then the verdict
    ("sinusoidal", "in the sinusoids' span", "not sinusoidal" or "too few positions") and a
    reading.

    pretraining_length: the sequence length most pre-training used, at most the table's rows;
    rows past it are summarised apart. None: DEFAULT_PRETRAINING_LENGTH, or every row of a
    shorter table.
    """
    table = check_table(table)
    num_positions, hidden_size = table.shape
    pretraining_length = check_length(pretraining_length, num_positions)
    basis = sinusoid_basis(num_positions, hidden_size)
    candidates = {
        "model": table,
        "sinusoidal": sinusoidal_table(num_positions, hidden_size),
        "random": random_table(table, seed),
    }
    figures = {
        "shape": [num_positions, hidden_size],
        "pretraining_length": pretraining_length,
        "basis_rank": basis.shape[1],
        "random_seed": seed,
        "tables": {
            name: table_figures(candidate, basis, pretraining_length)
            for name, candidate in candidates.items()
        },
    }
    figures["verdict"] = verdict(figures["tables"]["model"])
    figures["reading"] = reading(figures)
    return figures


def verdict(model: dict) -> str:
    """One of "sinusoidal", "in the sinusoids' span", "not sinusoidal", "too few positions" for
    the figures of one table (table_figures)."""
    r2 = model["fit"]["r2_adjusted"]
    if r2 is None:
        return "too few positions"
    if r2 < SINUSOIDAL_R2:
        return "not sinusoidal"
    if model["frequency"]["at_sinusoid_frequency"] < SINUSOIDAL_FREQUENCY_SHARE:
        return "in the sinusoids' span"
    return "sinusoidal"


def _float(value) -> float | None:
    return None if value is None else float(value)
