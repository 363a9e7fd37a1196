"""npbert embed --input: a corpus streamed into shards, in bounded memory, safe to interrupt."""

import json
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import npbert
from npbert.cli import main
from npbert.stream import read_corpus

WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which "
    "this be or has had not but first one their its new after who embedding café naïve "
    "position segment token layer learned vector 2024 ? ! , ."
).split()


def corpus_lines(count: int, seed: int = 0, longest: int = 60) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(0, longest))) for _ in range(count)]


def cli(*argv, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "npbert.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    return npbert.Embedder.from_pretrained(minilm_dir)


def test_streamed_rows_equal_each_text_embedded_alone(tmp_path, capsys, minilm_dir, embedder):
    lines = [*corpus_lines(300), "", "Ünïcode — ok"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = main(
        [
            "embed",
            "--input",
            str(tmp_path / "in.txt"),
            "--out",
            str(tmp_path / "out"),
            "--model",
            str(minilm_dir),
            "--shard-tokens",
            "1000",
            "--batch-size",
            "7",
        ]
    )
    assert code == 0 and "embedded 302 texts" in capsys.readouterr().out
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["complete"] and len(index["shards"]) > 3 and index["texts"] == 302
    streamed = list(read_corpus(tmp_path / "out"))
    assert len(streamed) == len(lines)
    for text, rows in zip(lines, streamed, strict=True):
        np.testing.assert_array_equal(rows, embedder(text).embeddings)


def test_jsonl_pairs_from_stdin(tmp_path, capsys, minilm_dir, embedder):
    items = [
        {"text": "Who is Sinan?", "pair": "Sinan wrote a notebook."},
        {"text": "this is a test sentence"},
    ]
    stdin = "\n".join(json.dumps(item) for item in items) + "\n"
    result = cli(
        "embed",
        "--input",
        "-",
        "--input-format",
        "jsonl",
        "--out",
        tmp_path / "o",
        "--model",
        minilm_dir,
        input=stdin,
    )
    assert result.returncode == 0, result.stderr
    first, second = read_corpus(tmp_path / "o")
    np.testing.assert_array_equal(first, embedder(items[0]["text"], items[0]["pair"]).embeddings)
    np.testing.assert_array_equal(second, embedder(items[1]["text"]).embeddings)
    types = np.load(tmp_path / "o" / "shard-00000.token_type_ids.npy")
    assert (
        types[: len(first)].tolist()
        == embedder(items[0]["text"], items[0]["pair"]).token_type_ids.tolist()
    )


def _limit_memory(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def test_corpus_larger_than_the_memory_limit_completes(tmp_path, minilm_dir):
    limit = 1 << 30  # address space, not just resident memory: a hard bound
    lines = corpus_lines(30_000, seed=1, longest=50)
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    result = cli(
        "embed",
        "--input",
        tmp_path / "big.txt",
        "--out",
        tmp_path / "big",
        "--model",
        minilm_dir,
        preexec_fn=_limit_memory(limit),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    index = json.loads((tmp_path / "big" / "index.json").read_text())
    output_bytes = index["tokens"] * 384 * 4
    assert index["complete"] and index["texts"] == len(lines)
    assert output_bytes > limit * 1.1, "the corpus should not fit in the limit"
    shards = sum((tmp_path / "big" / f"{s['name']}.npy").stat().st_size for s in index["shards"])
    assert shards >= output_bytes


def test_interrupted_run_leaves_complete_shards_and_resumes(tmp_path, minilm_dir):
    lines = corpus_lines(6000, seed=2)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    args = [
        "embed",
        "--input",
        tmp_path / "in.txt",
        "--out",
        out,
        "--model",
        minilm_dir,
        "--shard-tokens",
        "2000",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "npbert.cli", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        index_path = out / "index.json"
        if index_path.is_file() and len(json.loads(index_path.read_text())["shards"]) >= 3:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    index = json.loads((out / "index.json").read_text())
    assert not index["complete"] and len(index["shards"]) >= 3
    listed = {
        f"{s['name']}{suffix}.npy"
        for s in index["shards"]
        for suffix in ("", ".lengths", ".input_ids", ".token_type_ids")
    }
    on_disk = {p.name for p in out.glob("shard-*")}
    assert listed <= on_disk  # every listed shard is whole; an unlisted one is replaced later
    for shard in index["shards"]:
        rows = np.load(out / f"{shard['name']}.npy")
        assert len(rows) == shard["tokens"] == np.load(out / f"{shard['name']}.lengths.npy").sum()

    again = cli(*args)
    assert again.returncode == 2 and "pass --resume" in again.stderr
    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "index.json").read_text())["texts"] == len(lines)
    clean = cli(*args[:4], tmp_path / "clean", *args[5:])
    assert clean.returncode == 0
    for a, b in zip(read_corpus(out), read_corpus(tmp_path / "clean"), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not list(out.glob(".*.tmp"))


def test_resume_refuses_a_run_with_other_settings(tmp_path, minilm_dir):
    (tmp_path / "in.txt").write_text("a b c\nd e f\n")
    base = ["embed", "--input", tmp_path / "in.txt", "--out", tmp_path / "o", "--model", minilm_dir]
    assert cli(*base).returncode == 0
    other = cli(*base, "--shard-tokens", "5", "--resume")
    assert other.returncode == 2 and "other settings (shard_tokens)" in other.stderr


@pytest.mark.parametrize(
    ("name", "content", "extra", "message"),
    [
        ("c.jsonl", '{"text": "ok"}\n{"text": 3}\n', [], "c.jsonl line 2: expected an object"),
        ("c.jsonl", '{"text": "ok"}\n{oops\n', [], "c.jsonl line 2: not valid JSON"),
        ("c.txt", "short\n" + "word " * 600 + "\n", [], "c.txt line 2 has 602 tokens"),
        ("c.txt", "x\n", ["embed", "x"], "--input embeds a whole file"),
    ],
)
def test_bad_corpus_input_exits_2_naming_the_line(
    tmp_path, minilm_dir, name, content, extra, message
):
    (tmp_path / name).write_text(content)
    argv = extra or ["embed"]
    result = cli(*argv, "--input", tmp_path / name, "--out", tmp_path / "o", "--model", minilm_dir)
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_long_lines_are_cut_with_truncate(tmp_path, minilm_dir):
    (tmp_path / "c.txt").write_text("word " * 600 + "\n")
    result = cli(
        "embed",
        "--input",
        tmp_path / "c.txt",
        "--out",
        tmp_path / "o",
        "--model",
        minilm_dir,
        "--truncate",
    )
    assert result.returncode == 0, result.stderr
    (rows,) = read_corpus(tmp_path / "o")
    assert rows.shape == (512, 384)


def test_input_needs_an_output_directory(minilm_dir, tmp_path):
    (tmp_path / "c.txt").write_text("x\n")
    result = cli("embed", "--input", tmp_path / "c.txt", "--model", minilm_dir)
    assert result.returncode == 2 and "--input needs --out DIR" in result.stderr


def test_missing_input_file(minilm_dir, tmp_path):
    result = cli(
        "embed", "--input", tmp_path / "nope.txt", "--out", tmp_path / "o", "--model", minilm_dir
    )
    assert result.returncode == 2 and "No such file" in result.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
