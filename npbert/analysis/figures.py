"""What npbert's figures share: the path checked before the work, a bare matplotlib Figure,
and an atomic write of it as PNG, SVG or PDF.

matplotlib is an optional extra (npbert[plot]) and is imported only when a figure is drawn.
A figure is a bare matplotlib Figure on the Agg canvas: no pyplot, so no GUI backend is
started and no global state of the caller's matplotlib changes.
"""

from pathlib import Path

import numpy as np

from npbert.atomic import check_output_file, write_atomically
from npbert.errors import InputError

FORMATS = (".png", ".svg", ".pdf")
DPI = 64  # pixels an inch: a PNG of 11 x 12 inches is 704 x 768
INSTALL = "pip install 'npbert[plot]'"


def check_plot_path(path: Path) -> None:
    """InputError unless path names a .png, .svg or .pdf (not a directory) in a directory
    that exists, and matplotlib is there to draw it: before the analysis, not after."""
    check_output_file(path, "{plot}", FORMATS)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"{{plot}}: plotting needs matplotlib: {INSTALL}") from None


def new_figure(path: Path, size: tuple[float, float]):
    """A constrained-layout Figure of `size` inches on the Agg canvas, once the path is
    checked (check_plot_path); InputError where matplotlib cannot be imported."""
    check_plot_path(path)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise InputError(f"{{plot}}: plotting needs matplotlib ({error}): {INSTALL}") from None
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: Path) -> None:
    """Write the figure to path, as its suffix says, atomically."""
    if path.suffix.lower() == ".png":
        write_atomically(path, lambda f: _save_png(figure.canvas, f))
    else:
        write_atomically(path, lambda f: figure.savefig(f, format=path.suffix.lower()[1:]))


def _save_png(canvas, file) -> None:
    # A 256-colour PNG, quantized by Pillow (a dependency of matplotlib's): the heatmaps are
    # noise to a compressor, and a true-colour PNG of them is three times the size.
    from PIL import Image

    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3]
    Image.fromarray(pixels).quantize(colors=256).save(file, format="PNG", optimize=True)
