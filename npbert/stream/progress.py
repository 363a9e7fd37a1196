"""Progress of the corpus job against the input's size, on standard error.

"bar": tqdm's bar (bytes of input embedded, total, percent, ETA, and tokens); without a total
(standard input) it counts up. "lines": the same figures as one line every `every` seconds,
for logs and other non-terminals, where a bar redrawn in place would be one endless line.
None: nothing.
"""

import sys
import time

from npbert.errors import InputError
from npbert.layer.inputs import shown

MODES = ("bar", "lines", None)


def check_mode(mode) -> None:
    """InputError unless mode is one of MODES (or False, for None)."""
    if not (mode is None or mode is False or (isinstance(mode, str) and mode in MODES)):
        raise InputError(f"progress must be 'bar', 'lines' or None, not {shown(mode)}")


class Progress:
    """Bytes of input embedded so far, against `total` (None if unknown)."""

    def __init__(self, mode: str | None, total: int | None, initial: int = 0, every: float = 10):
        from tqdm import tqdm  # huggingface_hub depends on it

        self.mode, self.every = mode, every
        self.format_meter = tqdm.format_meter
        self.total, self.done, self.tokens = total, initial, 0
        self.start = self.last = time.monotonic()
        self.initial = initial
        self.bar = None
        if mode == "bar":
            self.bar = tqdm(
                total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                desc="embedding", file=sys.stderr, dynamic_ncols=True,
            )  # fmt: skip

    def update(self, nbytes: int, tokens: int) -> None:
        self.done += nbytes
        self.tokens += tokens
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.tokens:,} tokens", refresh=False)
            self.bar.update(nbytes)
        elif self.mode == "lines" and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        """'embedding: 45%|... 12.0MB/26.5MB [00:10<00:12, 1.2MB/s] 3,000,000 tokens'."""
        elapsed = time.monotonic() - self.start
        meter = self.format_meter(
            self.done - self.initial if self.total is None else self.done,
            None if self.total is None else self.total,
            elapsed, prefix="embedding", unit="B", unit_scale=True, unit_divisor=1024,
            ncols=0 if self.total is None else 80,
            rate=(self.done - self.initial) / elapsed if elapsed > 0 else None,
        )  # fmt: skip
        return f"{meter}, {self.tokens:,} tokens ({self.tokens / max(elapsed, 1e-9):,.0f}/s)"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
