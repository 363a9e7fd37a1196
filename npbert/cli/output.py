"""What the command writes: lines on standard output, JSON, and output files."""

import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from npbert import __version__


def model_title(model) -> str:
    """A figure's name for the model: a Hub repo id as given, a directory by its last two
    parts (org/name, as the Hub names it)."""
    return "/".join(Path(model).parts[-2:]) if Path(model).is_dir() else str(model)


def say(*parts) -> None:
    """print() to standard output, where a command's results go."""
    with on_stdout():
        print(*parts)


def flush_stdout() -> None:
    """Flush what the command said: a reader that went away shows here, not at exit."""
    with on_stdout():
        sys.stdout.flush()


@contextmanager
def on_stdout():
    """Writing standard output: its OSError (a full disk behind `>`) names no file, and would
    read as the --out file's; said as standard output's. BrokenPipeError as it is: the reader
    went away (reader_gone)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        reason = error.strerror or str(error)
        raise OSError(error.errno, f"cannot write to standard output ({reason})") from None


def to_json(value) -> str:
    """Standard JSON (RFC 8259), which has no NaN or infinity: those numbers (a candidate's
    NaN, a relative error over a zero) go as the strings "NaN", "Infinity", "-Infinity",
    which float() in Python and Number() in JavaScript read back."""

    def finite(v):
        if isinstance(v, dict):
            return {key: finite(item) for key, item in v.items()}
        if isinstance(v, list | tuple):
            return [finite(item) for item in v]
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
        return v

    return json.dumps(finite(value), indent=1, allow_nan=False)


def metadata(weights, **inputs) -> dict:
    return {
        "npbert": __version__,
        **weights.source,
        **inputs,
        "model_type": weights.config.model_type,
        "layer_norm_eps": weights.config.layer_norm_eps
        if weights.config.norm == "layer_norm"
        else None,
    }


def save(path: Path, output: str, arrays: dict[str, np.ndarray], meta: dict) -> int:
    """Write .npz (all arrays and a `metadata` JSON string) or .npy (arrays[output], the
    embeddings or their projection), atomically: a temporary file renamed into place, so an
    interrupted run leaves no partial file."""
    from npbert.atomic import check_output_file, write_atomically

    check_output_file(path, "--out", (".npz", ".npy"))
    if path.suffix.lower() == ".npz":
        write_atomically(path, lambda f: np.savez(f, **arrays, metadata=np.array(json.dumps(meta))))
    else:
        write_atomically(path, lambda f: np.save(f, arrays[output]))
    say(f"wrote {path}: {output} {arrays[output].shape} {arrays[output].dtype}")
    return 0


NORMS = {None: ", no norm", "no_norm": ", NoNorm (scale and shift only)"}


def describe(config) -> str:
    """One line on what a checkpoint's embedding layer is."""
    positions = "no position table"
    if config.max_position_embeddings is not None:
        positions = f"{config.max_position_embeddings} positions ({config.positions})"
    types = "no token-type table"
    if config.type_vocab_size:
        types = f"{config.type_vocab_size} token type{'s' * (config.type_vocab_size != 1)}"
    return (
        f"{config.model_type}: {config.formula}; vocab {config.vocab_size}, width "
        f"{config.embedding_size}, hidden {config.hidden_size}, {positions}, {types}"
        + (
            f", eps {config.layer_norm_eps:g}"
            if config.norm == "layer_norm"
            else NORMS[config.norm]
        )
    )


def summary(weights, name: str, embeddings: np.ndarray, tokens, texts, ids=None) -> str:
    """A few readable lines: the model, the shape, and per sequence its tokens and end rows."""
    from npbert.analysis.explain import format_row

    batch = embeddings if embeddings.ndim == 3 else embeddings[None]  # (B, L, H)
    lines = [
        f"model: {weights.source.get('model')}",
        f"   {describe(weights.config)}",
        f"{name}: {embeddings.shape} {embeddings.dtype}",
    ]
    for b, rows in enumerate(batch):
        lines.append("")
        if texts is not None:
            real = tokens[b]  # the text's own tokens: padding is not among them
            lines.append(f"[{b}] {texts[b]}")
            lines.append(f"    {len(real)} tokens: {' '.join(real)}")
            lines.append(f"    input_ids: {' '.join(map(str, ids[b, : len(real)]))}")
            rows = rows[: len(real)]  # (L_b, H): padding is not the text's
        else:
            lines.append(f"[{b}] {rows.shape[0]} tokens")
        if len(rows):  # a tokenizer without special tokens gives an empty text none
            lines.append(f"    first {format_row(rows[0])}")
            lines.append(f"    last  {format_row(rows[-1])}")
    return "\n".join(lines)
