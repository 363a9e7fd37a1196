"""What several texts walked through the layer share, as the walk-throughs point out: a token
gets the same word row wherever it stands (a row knows no context), a position row depends on
the position alone (by the family's rule), and each token takes the segment row of its part
of a pair. Each claim is checked on the stages themselves, row for row.
"""

import itertools
from dataclasses import dataclass

import numpy as np

LISTED = 8  # repeated tokens listed, the most frequent first


@dataclass(frozen=True)
class Walked:
    """One text as the layer took it: its tokens (None for ids alone), its inputs with the
    family's defaults (input_ids, token_type_ids, position_ids: (L,) each, None where the
    layer takes none), and embed_stages' stages, (L, E) each."""

    tokens: list[str] | None
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None
    position_ids: np.ndarray | None
    stages: dict


def shared_lines(config, walked: list[Walked]) -> list[str]:
    """The section "What the texts share" (or "What the text shares"), [] where one text has
    nothing to show: no token twice, no pair."""
    several, words = len(walked) > 1, word_lines(walked)
    pair = any(w.token_type_ids is not None and w.token_type_ids.any() for w in walked)
    if not (several or words or pair):
        return []
    title = f"What the {len(walked)} texts share" if several else "What the text shares"
    lines = ["", title, *words]
    if several:
        lines += position_lines(config, walked)
    if config.type_vocab_size and (several or pair):
        lines += segment_lines(walked)
    return lines


def word_lines(walked: list[Walked]) -> list[str]:
    """Each token that stands more than once, across or within the texts, with where, and
    whether its word rows are equal (they are: a lookup)."""
    places: dict[int, list[tuple[int, int]]] = {}
    for text, walk in enumerate(walked, start=1):
        for position, token_id in enumerate(walk.input_ids.tolist()):
            places.setdefault(token_id, []).append((text, position))
    repeated = sorted(((t, p) for t, p in places.items() if len(p) > 1), key=lambda i: -len(i[1]))
    if not repeated:
        return []
    lines = [
        "   Token rows: a token gets the same row of word_embeddings wherever it stands, in "
        "any text: a row knows no context."
    ]
    for token_id, where in repeated[:LISTED]:
        rows = [walked[text - 1].stages["word"][position] for text, position in where]
        same = "the same row" if all(np.array_equal(rows[0], r) for r in rows) else "ROWS DIFFER"
        lines.append(f"      {name_of(walked, where[0], token_id)}: {same} at {places_text(where)}")
    if len(repeated) > LISTED:
        lines.append(f"      and {len(repeated) - LISTED} more tokens that stand more than once")
    return lines


def name_of(walked: list[Walked], place: tuple[int, int], token_id: int) -> str:
    """ "[CLS] (id 101)", or "id 101" for ids given without their tokens."""
    tokens = walked[place[0] - 1].tokens
    return f"id {token_id}" if tokens is None else f"{tokens[place[1]]} (id {token_id})"


def places_text(where: list[tuple[int, int]]) -> str:
    """ "text 1 position 0, text 2 position 0" (", ..." past six places)."""
    shown = ", ".join(f"text {t} position {p}" for t, p in where[:6])
    return shown + (", ..." if len(where) > 6 else "")


def position_lines(config, walked: list[Walked]) -> list[str]:
    """The family's rule for position rows, checked: tokens at the same position id in
    different texts get equal rows."""
    if config.positions == "none":
        return ["   Position rows: none in this layer (positions enter in the attention)."]
    rule = (
        f"the i-th token that is not padding takes row padding_idx + 1 + i = "
        f"{config.padding_idx + 1} + i, padding row {config.padding_idx}"
        if config.positions == "padded"
        else f"position i takes row {config.position_offset} + i"
        if config.position_offset
        else "position i takes row i"
    )
    rows: dict[int, list[np.ndarray]] = {}
    for walk in walked:
        for i, row in enumerate(walk.position_ids.tolist()):
            rows.setdefault(row, []).append(walk.stages["position"][i])
    checked = [r for r in rows.values() if len(r) > 1]
    same = all(np.array_equal(r[0], other) for r in checked for other in r[1:])
    return [
        f"   Position rows: the same for every text, by position alone ({rule}): "
        + ("equal" if same else "NOT EQUAL")
        + f" at the {len(checked)} rows more than one text looks up."
    ]


def segment_lines(walked: list[Walked]) -> list[str]:
    """Which segment row each text's tokens take: sentence A's and B's spans."""
    lines = ["   Segment rows: each token takes the row of its token type."]
    for text, walk in enumerate(walked, start=1):
        spans = []
        for start, stop, row in runs(walk.token_type_ids):
            span = f"token {start}" if stop == start + 1 else f"tokens {start}..{stop - 1}"
            spans.append(f"{span} row {row}")
        label = f"text {text}" if len(walked) > 1 else "the text"
        pair = " (a pair: sentence B takes row 1)" if walk.token_type_ids.any() else ""
        lines.append(f"      {label}{pair}: {', '.join(spans)}")
    return lines


def runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, stop, value) of each run of equal values in (L,)."""
    edges = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
    return [(a, b, int(values[a])) for a, b in itertools.pairwise(edges)]
