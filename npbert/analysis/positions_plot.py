"""The figure of `npbert positions`: a position table beside the sinusoidal one, in six panels.

matplotlib is an optional extra (npbert[plot]) and is imported only when a figure is drawn.
The figure is a bare matplotlib Figure on the Agg canvas: no pyplot, so no GUI backend is
started and no global state of the caller's matplotlib changes.
"""

from pathlib import Path

import numpy as np

from npbert.analysis.figures import new_figure, save_figure
from npbert.analysis.positions import cosine_similarity, sinusoidal_table

FIGSIZE = (11.0, 12.0)  # inches, width x height: a PNG of 704 x 768 pixels at DPI


def plot_positions(table: np.ndarray, figures: dict, path: Path, *, title: str = "") -> None:
    """Draw table (P, H) and the sinusoidal table of its shape, with the figures of
    npbert.analysis.positions.analyse, to path (.png, .svg or .pdf), written atomically.

    Panels: the two tables as heatmaps (positions x dimensions), their cosine similarity
    matrices (P x P), similarity against distance, and row norms by position.
    InputError (saying how to install it) when matplotlib, or the part of it this draws with,
    cannot be imported.
    """
    figure = new_figure(path, FIGSIZE)
    table = np.asarray(table, dtype=np.float64)
    sinusoidal = sinusoidal_table(*table.shape)
    axes = figure.subplots(3, 2)
    figure.suptitle(
        f"{title or 'model'}: the {table.shape[0]} x {table.shape[1]} position table against "
        "the sinusoidal table of the same shape"
    )
    _heatmap(figure, axes[0, 0], table, "model: position table")
    _heatmap(figure, axes[0, 1], sinusoidal, "sinusoidal: sin on even dims, cos on odd")
    _similarity(figure, axes[1, 0], table, "model: cosine between positions")
    _similarity(figure, axes[1, 1], sinusoidal, "sinusoidal: cosine between positions")
    _by_distance(axes[2, 0], figures["tables"])
    _norms(axes[2, 1], figures["tables"]["model"]["norms"], figures["pretraining_length"])
    save_figure(figure, path)


def _heatmap(figure, ax, table: np.ndarray, title: str) -> None:
    # The colour scale stops at the 99th percentile of |value|, so that a few large rows (BERT's
    # position 0 is several times the others) do not wash the rest out.
    limit = float(np.percentile(np.abs(table), 99)) or 1.0
    image = ax.imshow(
        table, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest"
    )
    ax.set(title=title, xlabel="dimension", ylabel="position")
    figure.colorbar(image, ax=ax)


def _similarity(figure, ax, table: np.ndarray, title: str) -> None:
    image = ax.imshow(cosine_similarity(table), cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set(title=title, xlabel="position", ylabel="position")
    figure.colorbar(image, ax=ax)


def _by_distance(ax, tables: dict) -> None:
    for name, style in (("model", "C0-"), ("sinusoidal", "C1-"), ("random", "C7:")):
        curve = tables[name]["similarity"]["by_distance"]
        ax.plot(np.arange(1, len(curve)), curve[1:], style, label=name, linewidth=1)
    ax.set(
        title="mean cosine against distance",
        xlabel="distance between positions",
        ylabel="cosine",
        xscale="log",
    )
    ax.axhline(0, color="k", linewidth=0.5)
    ax.legend()


def _norms(ax, norms: dict, pretraining_length: int) -> None:
    ax.plot(norms["by_position"], "C0-", linewidth=1)
    ax.axvline(pretraining_length - 0.5, color="C3", linestyle="--", linewidth=1)
    ax.text(pretraining_length, norms["median"], f" {pretraining_length}", color="C3")
    ax.set(title="model: row norm by position", xlabel="position", ylabel="norm", ylim=(0, None))
