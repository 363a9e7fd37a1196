"""One stage of a candidate against npbert's references: StageResult."""

from dataclasses import dataclass, field


@dataclass
class StageResult:
    """One stage of the candidate against the float64 reference (and npbert's float32)."""

    name: str
    shape_ok: bool
    shapes: tuple  # (candidate shape, expected shape)
    max_abs: float = float("inf")
    max_rel: float = float("inf")
    max_abs_float32: float = float("inf")  # against npbert's float32 output
    max_rel_float32: float = float("inf")
    atol: float | None = None  # the atol it was held to
    ok: bool = False
    worst: dict = field(default_factory=dict)  # index, candidate, reference, npbert_float32
    batch_axis: str | None = None  # "added" or "dropped" to compare (BATCH_AXIS), or None
    padding_only: bool = False  # out of tolerance, but only where attention_mask is 0
