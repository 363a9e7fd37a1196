"""The positions analysis for people: what its figures say, in sentences and a table."""

# Nearby positions count as "alike" (a band along the diagonal of the similarity matrix) when
# the cosine at distance 1 exceeds the mean cosine at distances P/2 and beyond by this much.
BAND_MARGIN = 0.2


def reading(figures: dict) -> list[str]:
    """The figures (analyse) in a few plain sentences."""
    model, sinusoidal, random = (figures["tables"][k] for k in ("model", "sinusoidal", "random"))
    hidden_size = figures["shape"][1]
    share = model["frequency"]["at_sinusoid_frequency"]
    return [
        _fit_sentence(figures["verdict"], model["fit"], random["fit"], figures["basis_rank"]),
        f"{share:.0%} of its {hidden_size} dimensions vary fastest at the frequency of the "
        f"sinusoid in the same dimension (sinusoidal table: "
        f"{sinusoidal['frequency']['at_sinusoid_frequency']:.0%}, random: "
        f"{random['frequency']['at_sinusoid_frequency']:.0%}); "
        f"{model['frequency']['faster_than_sinusoids']:.0%} vary fastest with a period shorter "
        f"than the fastest sinusoid's 2 pi positions, out of the sinusoids' reach (random: "
        f"{random['frequency']['faster_than_sinusoids']:.0%}).",
        _band_sentence(model["similarity"], sinusoidal["similarity"], figures["shape"][0]),
        _norms_sentence(model["norms"], figures["pretraining_length"], figures["shape"][0]),
    ]


def _fit_sentence(verdict: str, fit: dict, random_fit: dict, rank: int) -> str:
    if verdict == "too few positions":
        return (
            f"Too few positions to tell: the sinusoids span {rank} "
            f"direction{'s' * (rank != 1)}, enough to fit "
            "any table of this length exactly."
        )
    numbers = (
        f"the sinusoids explain {fit['r2']:.1%} of its variance, and {random_fit['r2']:.1%} of a "
        f"random table's with their {rank} degrees of freedom; adjusted for those, R^2 "
        f"{fit['r2_adjusted']:.3f} against {random_fit['r2_adjusted']:.3f}"
    )
    return {
        "sinusoidal": f"Sinusoidal, dimension by dimension: {numbers}.",
        "in the sinusoids' span": f"In the sinusoids' span: {numbers}; but its dimensions do "
        "not each vary fastest at their sinusoid's frequency, as the sinusoidal table's do. A "
        "linear map of the sinusoidal table, as is every table smooth enough (the span holds "
        "every slow curve over these positions): this does not say that it was made of "
        "sinusoids.",
        "not sinusoidal": f"Not the sinusoidal table, nor a linear map of it: {numbers}.",
    }[verdict]


def _band_sentence(similarity: dict, sinusoidal: dict, num_positions: int) -> str:
    alike = similarity["neighbour"] - similarity["far"] >= BAND_MARGIN
    return (
        f"{'Nearby positions are alike' if alike else 'No band: nearby positions are not alike'}"
        f": cosine {similarity['neighbour']:.2f} between neighbours, {similarity['far']:.2f} on "
        f"average {num_positions // 2} or more apart (sinusoidal table: "
        f"{sinusoidal['neighbour']:.2f} and {sinusoidal['far']:.2f})."
    )


def _norms_sentence(norms: dict, pretraining_length: int, num_positions: int) -> str:
    largest = ", ".join(f"{p} ({n:.2f})" for p, n in norms["largest"])
    past = norms["mean_past_pretraining"]
    return (
        f"Row norms: median {norms['median']:.2f}; largest at positions {largest}; mean "
        f"{norms['mean_within_pretraining']:.2f} over positions 0..{pretraining_length - 1}"
        + ("." if past is None else f", {past:.2f} over {pretraining_length}..{num_positions - 1}.")
    )


def _report_rows(figures: dict) -> list[tuple[str, object, str]]:
    """(label, figure of one table -> value, format) for each line of the report's table."""
    num_positions = figures["shape"][0]
    distances = [d for d, _ in figures["tables"]["model"]["similarity"]["at_distance"]]
    percentiles = (("p10", "10th percentile"), ("median", "median"), ("p90", "90th"))
    return [
        ("R^2 by the sinusoids, adjusted", lambda t: t["fit"]["r2_adjusted"], "{:.3f}"),
        (f"  raw ({figures['basis_rank']} degrees of freedom)", lambda t: t["fit"]["r2"], "{:.3f}"),
        *((f"  per dimension, {name}", lambda t, k=key: t["fit"]["per_dimension"][k], "{:.3f}")
          for key, name in percentiles),
        ("dims at their sinusoid's frequency",
         lambda t: t["frequency"]["at_sinusoid_frequency"], "{:.0%}"),
        ("dims faster than every sinusoid",
         lambda t: t["frequency"]["faster_than_sinusoids"], "{:.0%}"),
        ("median period (positions)", lambda t: t["frequency"]["median_period"], "{:.1f}"),
        *((f"cosine, {d} apart", lambda t, i=i: t["similarity"]["at_distance"][i][1], "{:.3f}")
          for i, d in enumerate(distances)),
        (f"cosine, {num_positions // 2}+ apart (mean)", lambda t: t["similarity"]["far"], "{:.3f}"),
        *_norm_rows(num_positions, figures["pretraining_length"]),
    ]  # fmt: skip


def _norm_rows(num_positions: int, length: int) -> list[tuple[str, object, str]]:
    """The report's rows of row norms: first, last within and past the pre-training length."""
    norms = [("row norm, position 0", "first")]
    if 1 < length < num_positions:  # unless it is the first or the last
        norms.append((f"row norm, position {length - 1}", "last_within_pretraining"))
    norms += [
        (f"row norm, position {num_positions - 1}", "last"),
        ("row norm, median", "median"),
        (f"row norm, mean of 0..{length - 1}", "mean_within_pretraining"),
    ]
    if length < num_positions:
        norms.append((f"row norm, mean of {length}..{num_positions - 1}", "mean_past_pretraining"))
    return [(label, lambda t, k=key: t["norms"][k], "{:.3f}") for label, key in norms]


def format_report(figures: dict) -> str:
    """The figures (analyse) for people: the three tables side by side, then the reading."""
    num_positions, hidden_size = figures["shape"]
    rows = _report_rows(figures)
    width = max(len(label) for label, _, _ in rows)
    lines = [
        f"position table: {num_positions} positions x {hidden_size} dims, beside the sinusoidal "
        f"table of the same shape and a random one (seed {figures['random_seed']}, same mean "
        "and std)",
        f"{'':<{width}}  {'model':>10} {'sinusoidal':>10} {'random':>10}",
    ]
    for label, value, style in rows:
        cells = (value(figures["tables"][name]) for name in ("model", "sinusoidal", "random"))
        lines.append(
            f"{label:<{width}}  "
            + " ".join(f"{'-' if v is None else style.format(v):>10}" for v in cells)
        )
    lines += ["", f"verdict: {figures['verdict']}", *figures["reading"]]
    return "\n".join(lines)
