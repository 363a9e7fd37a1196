"""The figure of `npbert explain --plot`: the BERT paper's figure of the input representation
(Devlin et al. 2019, figure 2), drawn with a checkpoint's values for one text or pair.

One column per token, its text and id above; a row for each stage the family has: the token,
segment and position embeddings, their sum and the LayerNorm's output, each a heat strip over
the width (of a wide model, its first and last dimensions), with one colour scale per row and
its bar. figure_data computes what is drawn, so that it can be checked against the stages.
"""

from pathlib import Path

import numpy as np

from npbert.analysis.figures import new_figure, save_figure
from npbert.model import embed_stages

# (stage, the row's title): what the paper's figure stacks, and what follows it
ROWS = (
    ("word", "Token\nembeddings"),
    ("embedding_transformation", "Linear\n-> H"),  # MobileBERT's, of its trigram
    ("token_type", "+ Segment\nembeddings"),
    ("position", "+ Position\nembeddings"),
    ("sum", "= Sum"),
    ("embed_proj", "Projection\nE -> H"),
    ("layer_norm", "LayerNorm\noutput"),  # FNet's, before the Linear its layer ends with
    ("embeddings", "LayerNorm\noutput"),
)
WHOLE = 64  # a width up to this is drawn whole; a wider one, its first FIRST and last LAST
FIRST, LAST = 24, 8


def figure_data(weights, tokens, input_ids, token_type_ids, attention_mask, position_ids):
    """{"columns": ["[CLS]\\n101", ...], "rows": [(title, (dimensions drawn, L) float32)],
    "dimensions": which are drawn, in words, "width": E}: the stages of one text (inputs as
    npbert.analysis.explain.explain takes them), each token's row a column."""
    types = token_type_ids if weights.config.type_vocab_size else None
    stages = embed_stages(weights, input_ids, types, position_ids, attention_mask)
    width = stages["embeddings"].shape[-1]
    labels = tokens if tokens is not None else [str(i) for i in input_ids]
    titles = dict(ROWS)
    if "layer_norm" in stages:
        titles["embeddings"] = "Projection\nH -> H"
    elif weights.config.norm != "layer_norm":  # MobileBERT's NoNorm; Megatron-BERT's sum
        titles["embeddings"] = "NoNorm\noutput" if weights.config.norm else "Output\n(no norm)"
    # in the order the layer computes them (MobileBERT adds P before T)
    rows = [(titles[name], drawn(stages[name])) for name in stages if name in titles]
    return {
        "columns": [f"{token}\n{int(i)}" for token, i in zip(labels, input_ids, strict=True)],
        "rows": rows,
        "dimensions": dimensions_text(width),
        "width": width,
    }


def drawn(stage: np.ndarray) -> np.ndarray:
    """A stage (L, E) as drawn: (E, L), or of a wide one (FIRST + 1 + LAST, L), its first and
    last dimensions with a blank (NaN) row between."""
    columns = stage.T.astype(np.float32)  # (E, L)
    if len(columns) <= WHOLE:
        return columns
    gap = np.full((1, columns.shape[1]), np.nan, np.float32)
    return np.concatenate([columns[:FIRST], gap, columns[-LAST:]])  # (FIRST + 1 + LAST, L)


def dimensions_text(width: int) -> str:
    if width <= WHOLE:
        return f"all {width} dimensions"
    return f"dimensions 0-{FIRST - 1} and {width - LAST}-{width - 1} of {width}"


def dimension_ticks(drawn_rows: int, width: int) -> tuple[list[int], list[str]]:
    """The y ticks of a strip: its first and last dimension, and either side of the gap."""
    if drawn_rows == width:
        return [0, width - 1], ["0", str(width - 1)]
    rows = [0, FIRST - 1, FIRST + 1, FIRST + LAST]
    return rows, ["0", str(FIRST - 1), str(width - LAST), str(width - 1)]


def plot_explain(weights, tokens, input_ids, token_type_ids, attention_mask, position_ids, *,
                 path: Path, title: str = "") -> None:  # fmt: skip
    """Draw the figure of one text to path (.png, .svg or .pdf), written atomically; title:
    the model's name (default: the family's)."""
    data = figure_data(weights, tokens, input_ids, token_type_ids, attention_mask, position_ids)
    length = len(data["columns"])
    figure = new_figure(path, (min(20.0, 2.5 + 0.5 * length), 1.6 * len(data["rows"]) + 1.2))
    axes = np.atleast_1d(figure.subplots(len(data["rows"]), 1))
    figure.suptitle(
        f"{title or weights.config.model_type}: the input representation, token by token "
        f"(the BERT paper's figure 2)\n{data['dimensions']} of each row, top to bottom; one "
        "colour scale a row"
    )
    for ax, (title, matrix) in zip(axes, data["rows"], strict=True):
        limit = float(np.nanmax(np.abs(matrix))) or 1.0
        image = ax.imshow(matrix, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit,
                          interpolation="nearest")  # fmt: skip
        ax.set_ylabel(title, rotation=0, ha="right", va="center")
        ax.set_xticks([])
        ax.set_yticks(*dimension_ticks(matrix.shape[0], data["width"]), fontsize=7)
        figure.colorbar(image, ax=ax, pad=0.01)
    axes[0].xaxis.set_ticks_position("top")
    axes[0].set_xticks(range(length), labels=data["columns"], fontsize=8)
    save_figure(figure, path)
