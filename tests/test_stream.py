"""npbert embed --input: a corpus streamed into shards, in bounded memory, safe to interrupt."""

import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

import npbert
from npbert.cli import main
from npbert.stream import corpus as stream
from npbert.stream import local, read_corpus, stops
from npbert.stream.shards import SHARD_FILES

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
            "--shard-bytes",
            "4000",
        ]
    )
    assert code == 0 and "embedded 302 texts" in capsys.readouterr().out
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["complete"] and len(index["shards"]) > 3 and index["texts"] == 302
    streamed = list(read_corpus(tmp_path / "out"))
    assert len(streamed) == len(lines)
    for text, rows in zip(lines, streamed, strict=True):
        np.testing.assert_array_equal(rows, embedder(text).embeddings)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_worker_out_of_memory_stops_the_run_in_one_line(tmp_path, minilm_dir):
    lines = corpus_lines(50_000, seed=1, longest=50)  # one shard: 2 GB of float32 rows
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    argv = ["embed", "--input", tmp_path / "big.txt", "--out", tmp_path / "o", "--model"]
    argv += [minilm_dir, "--workers", "1", "--shard-bytes", "100000000"]
    result = cli(*argv, preexec_fn=_limit_memory(1200 << 20))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "a worker ran out of memory embedding shard-00000 (50,000 texts" in result.stderr


@pytest.mark.slow
def test_a_full_disk_is_one_line_saying_so(tmp_path, minilm_dir):
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(400, seed=1)) + "\n")

    def small_files():  # a write past 100 KiB stops short, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 << 10, 100 << 10))

    result = cli("embed", "--input", tmp_path / "c.txt", "--out", tmp_path / "o", "--model",
                 minilm_dir, "--workers", "1", preexec_fn=small_files)  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "written: a short write (the disk, or a quota, is full?)" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("command", "status"), [("embed", 1), ("compare", 2)])
def test_out_of_memory_in_the_command_itself_is_one_line(tmp_path, minilm_dir, command, status):
    """compare's 1 says the candidate is outside tolerance: running out of memory is not."""
    np.save(tmp_path / "ids.npy", np.full((4000, 512), 2000))  # 3 GB of float32 rows
    np.save(tmp_path / "c.npy", np.zeros((1, 1, 384), np.float32))
    candidate = [tmp_path / "c.npy"] if command == "compare" else []
    argv = [command, *candidate, "--ids-file", tmp_path / "ids.npy", "--model", minilm_dir]
    result = cli(*argv, preexec_fn=_limit_memory(1200 << 20))
    assert result.returncode == status and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert result.stderr.startswith("npbert: error: out of memory (Unable to allocate")


def committed(out: Path) -> int:
    """Shards a run has renamed into place (the index lists them at its next write)."""
    return len(list(out.glob("shard-*.lengths.npy")))


@pytest.mark.slow
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
        "--shard-bytes",
        "8000",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "npbert.cli", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and committed(out) < 3:
        time.sleep(0.01)
    workers = _children(process.pid)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert len(workers) == 2
    _assert_gone(workers)  # the workers end with the main process, even killed
    index = json.loads((out / "index.json").read_text())
    # the index lists the shards of its last write, once a second: some, or none yet
    assert not index["complete"] and len(index["shards"]) <= committed(out)
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
    if index["shards"]:
        assert again.returncode == 2 and "pass --resume" in again.stderr
        again = cli(*args, "--resume")
    # else the index lists none yet: the shards it does not list count as nothing
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "index.json").read_text())["texts"] == len(lines)
    clean = cli(*args[:4], tmp_path / "clean", *args[5:])
    assert clean.returncode == 0
    for a, b in zip(read_corpus(out), read_corpus(tmp_path / "clean"), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow
@pytest.mark.parametrize("gap", [0.0, 0.005, 0.05])
def test_ctrl_c_twice_ends_the_run_at_once_with_its_workers(tmp_path, minilm_dir, gap):
    """A second Ctrl-C while the first waited for the chunks in flight hung the run at exit,
    waiting for workers never told to stop; one in the cleanup left files and workers."""
    process, out = _running(tmp_path, minilm_dir)
    workers = _children(process.pid)
    process.send_signal(signal.SIGINT)
    time.sleep(gap)
    process.send_signal(signal.SIGINT)
    _ended_cleanly(process, out, workers, 130, "npbert: interrupted\n")


@pytest.mark.slow
def test_sigterm_stops_the_run_and_cleans_up_as_ctrl_c_does(tmp_path, minilm_dir):
    """SIGTERM (kill, timeout, a batch scheduler) ended the run at once, leaving its lock
    and pending files in the output directory."""
    process, out = _running(tmp_path, minilm_dir)
    workers = _children(process.pid)
    process.terminate()
    _ended_cleanly(process, out, workers, 143, "npbert: terminated\n")


def _ended_cleanly(process, out: Path, workers: list[int], code: int, said: str) -> None:
    """The run ends with `code`, saying only `said`, its workers gone, nothing left pending."""
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == code and stderr == said, stderr[-2000:]
    assert workers
    _assert_gone(workers)
    left = out.iterdir() if out.exists() else []  # gone if stopped before its first shard
    assert not [p.name for p in left if p.name.startswith(".")]  # no lock, none pending


def _running(tmp_path, minilm_dir) -> tuple[subprocess.Popen, Path]:
    """A corpus run in a process of its own, once it has shards in flight; and its --out."""
    (tmp_path / "in.txt").write_text("\n".join(corpus_lines(20000, seed=3)) + "\n")
    out = tmp_path / "out"
    args = ["embed", "--input", tmp_path / "in.txt", "--out", out, "--model", minilm_dir]
    process = subprocess.Popen(
        [sys.executable, "-m", "npbert.cli", *map(str, args)],  # chunks of 64 KB: 0.3 s each
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    started = out / "index.json"
    while time.monotonic() < deadline and process.poll() is None and not started.exists():
        time.sleep(0.01)
    time.sleep(0.5)  # chunks in flight
    return process, out


def _lists_a_shard(index: Path) -> bool:
    try:
        return bool(json.loads(index.read_text())["shards"])
    except (OSError, ValueError, KeyError):  # between writes
        return False


@pytest.mark.slow
def test_a_run_on_a_directory_another_run_is_writing_is_refused(tmp_path, minilm_dir):
    """Two runs on one --out (or a --resume while the first runs) each removed the other's
    pending shard files, and both stopped with "No such file or directory"."""
    (tmp_path / "in.txt").write_text("\n".join(corpus_lines(30000, seed=4)) + "\n")
    out = tmp_path / "out"
    args = ["embed", "--input", tmp_path / "in.txt", "--out", out, "--model", minilm_dir,
            "--shard-bytes", "8000", "--workers", "1", "--quiet"]  # fmt: skip
    first = subprocess.Popen([sys.executable, "-m", "npbert.cli", *map(str, args)],
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out / "index.json").exists():
            time.sleep(0.01)
        second = cli(*args, "--resume", timeout=120)
        # A run whose index lists no shard yet counts as empty (a retry may start afresh), and
        # then only the lock refuses; once a shard is listed, the non-empty --out speaks first.
        while time.monotonic() < deadline and not _lists_a_shard(out / "index.json"):
            time.sleep(0.01)
        fresh = cli(*args, timeout=120)
        _, stderr = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr
    assert second.stderr == f"npbert: error: --out {out}: another npbert run is writing it\n"
    assert fresh.returncode == 2 and "(once it has ended, if it is still running)" in fresh.stderr
    assert first.returncode == 0, stderr
    assert json.loads((out / "index.json").read_text())["complete"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # the lock too
    assert cli(*args, "--resume", timeout=120).returncode == 0  # free again


@pytest.mark.slow
def test_the_lock_is_left_in_no_directory_that_is_not_a_corpus(tmp_path, minilm_dir):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    (tmp_path / "in.txt").write_text("a b c\n")
    for resume in ((), ("--resume",)):
        result = cli("embed", "--input", tmp_path / "in.txt", "--out", tmp_path / "mine",
                     "--model", minilm_dir, *resume, timeout=120)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    children = [c for t in tasks.iterdir() for c in (t / "children").read_text().split()]
    return [int(c) for c in children]


def _assert_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    for pid in alive:  # end them here, so that a failure leaves none behind
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"worker processes {alive} outlived the killed main process"


@pytest.mark.slow
def test_resume_refuses_a_run_with_other_settings(tmp_path, minilm_dir):
    (tmp_path / "in.txt").write_text("a b c\nd e f\n")
    base = ["embed", "--input", tmp_path / "in.txt", "--out", tmp_path / "o", "--model", minilm_dir]
    assert cli(*base).returncode == 0
    other = cli(*base, "--shard-bytes", "5", "--resume")
    assert other.returncode == 2 and "other settings (shard_bytes)" in other.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "extra", "message"),
    [
        ("c.jsonl", '{"text": "ok"}\n{"text": 3}\n', [], "c.jsonl line 2: expected an object"),
        ("c.jsonl", '{"text": "ok"}\n{oops\n', [], "c.jsonl line 2: not valid JSON"),
        ("c.jsonl", '{"text": "a", "text": "b"}\n', [], "c.jsonl line 1: 'text' is given more"),
        ("c.jsonl", '{"text": "a", "pair": "b", "pair": "c"}\n', [], "line 1: 'pair' is given"),
        ("c.jsonl", '{"text": "ok", "id": ' + "9" * 5000 + "}\n", [], "c.jsonl line 1: not valid"),
        ("c.txt", "short\n" + "word " * 600 + "\n", [], "c.txt line 2 has 602 tokens"),
        ("c.txt", "x\n", ["embed", "x"], "unrecognized arguments: x (see npbert embed --input"),
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


@pytest.mark.slow
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
    assert result.returncode == 2 and "the following arguments are required: --out" in result.stderr


def test_missing_input_file(minilm_dir, tmp_path):
    result = cli(
        "embed", "--input", tmp_path / "nope.txt", "--out", tmp_path / "o", "--model", minilm_dir
    )
    assert result.returncode == 2 and "No such file" in result.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# --- resume against changed input (issue 11, item 11) -----------------------------------------


def _run(source, out, minilm_dir, *extra):
    return cli("embed", "--input", source, "--out", out, "--model", minilm_dir, *extra)


def _same_as_fresh(tmp_path, source, out, minilm_dir):
    fresh = tmp_path / "fresh"
    assert _run(source, fresh, minilm_dir, "--shard-bytes", "500").returncode == 0
    ours, theirs = list(read_corpus(out)), list(read_corpus(fresh))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def _finished_runs(tmp_path_factory):
    made = {}

    def make(text: str, model, *extra) -> Path:
        key = (text, str(model), extra)
        if key not in made:
            directory = tmp_path_factory.mktemp("finished")
            (directory / "in.txt").write_text(text)
            result = _run(directory / "in.txt", directory / "out", model, *extra)
            assert result.returncode == 0, result.stderr
            made[key] = directory
        return made[key]

    return make


@pytest.fixture
def finished(tmp_path, _finished_runs):
    """finished(text, model, *options): (tmp_path / "in.txt", tmp_path / "out"), a completed
    run of `text` with those options. The run is made once per module and copied here: the
    tests that damage its output (one each) asserted the same of a run of their own, at a
    process's start each."""

    def copy(text: str, model, *extra) -> tuple[Path, Path]:
        made = _finished_runs(text, model, *extra)
        shutil.copy2(made / "in.txt", tmp_path / "in.txt")
        shutil.copytree(made / "out", tmp_path / "out", symlinks=True)
        return tmp_path / "in.txt", tmp_path / "out"

    return copy


@pytest.mark.slow
def test_resume_after_the_input_grew_embeds_the_new_lines(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(40, seed=3)) + "\n")
    assert _run(source, out, minilm_dir, "--shard-bytes", "500").returncode == 0
    with source.open("a") as f:
        f.write("\n".join(corpus_lines(25, seed=4)) + "\n")
    resumed = _run(source, out, minilm_dir, "--shard-bytes", "500", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "embedded 65 texts" in resumed.stdout
    _same_as_fresh(tmp_path, source, out, minilm_dir)


@pytest.mark.slow
@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_resume_after_the_last_line_got_its_end_goes_on(tmp_path, minilm_dir, end):
    """A last line without its end, given it (and lines after it) since, was refused as a
    line that changed, though its text is the same."""
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_bytes(end.join(corpus_lines(40, seed=3)).encode())  # no line end at the end
    assert _run(source, out, minilm_dir, "--shard-bytes", "500").returncode == 0
    with source.open("ab") as f:
        f.write((end + end.join(corpus_lines(25, seed=4)) + end).encode())
    resumed = _run(source, out, minilm_dir, "--shard-bytes", "500", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "embedded 65 texts" in resumed.stdout
    _same_as_fresh(tmp_path, source, out, minilm_dir)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.replace("first", "FIRST", 1), "the input has changed since its first"),
        (lambda t: t[: len(t) // 3], "the input has changed since its first"),
        (lambda t: t + "more words\n", "line 40 has changed since it was embedded"),
    ],
    ids=["edited", "shortened", "last line extended"],
)
def test_resume_refuses_input_that_changed(finished, minilm_dir, change, message):
    text = "\n".join(["the first text", *corpus_lines(39, seed=5)])  # no newline at the end
    source, out = finished(text, minilm_dir, "--shard-bytes", "300")
    index = json.loads((out / "index.json").read_text())
    source.write_text(change(text))
    resumed = _run(source, out, minilm_dir, "--shard-bytes", "300", "--resume")
    assert resumed.returncode == 2 and message in resumed.stderr, resumed.stderr
    assert resumed.stderr.count("\n") == 1
    assert json.loads((out / "index.json").read_text()) == index  # nothing touched


@pytest.mark.slow
def test_resume_after_an_edit_between_kill_and_resume_is_refused(tmp_path, minilm_dir):
    """The shards hold the first texts; the file is edited there before --resume."""
    source, out = tmp_path / "in.txt", tmp_path / "out"
    lines = corpus_lines(60, seed=6)
    source.write_text("\n".join(lines) + "\n")
    assert _run(source, out, minilm_dir, "--shard-bytes", "300").returncode == 0
    index = json.loads((out / "index.json").read_text())
    kept = index["shards"][:2]  # as if killed after two shards
    index.update(
        shards=kept,
        texts=sum(s["texts"] for s in kept),
        tokens=sum(s["tokens"] for s in kept),
        complete=False,
    )
    prefix = "".join(line + "\n" for line in lines[: index["texts"]]).encode()
    from npbert.stream.chunks import Consumed

    consumed = Consumed()
    consumed.start_file(str(source), "txt")
    consumed.add(prefix, index["texts"])
    index["consumed"] = consumed.state()
    (out / "index.json").write_text(json.dumps(index))
    unedited = tmp_path / "unedited"
    shutil.copytree(out, unedited)
    resumed = _run(source, unedited, minilm_dir, "--shard-bytes", "300", "--resume")
    assert resumed.returncode == 0, resumed.stderr  # the index is as a killed run leaves it
    lines[1] = "an edited line"
    source.write_text("\n".join(lines) + "\n")
    resumed = _run(source, out, minilm_dir, "--shard-bytes", "300", "--resume")
    assert resumed.returncode == 2 and "the input has changed" in resumed.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"c.txt": '{"text": "x"}\n'}, {"c.jsonl": '{"text": "x"}\n{"text": "y"}\n'}),
        ({"1.txt": "hello wor", "2.txt": "ld\n"}, {"1.txt": "hello world\nnext text\n"}),
    ],
    ids=["read as another format", "the same bytes in other files"],
)
def test_resume_refuses_a_directory_whose_texts_changed_though_its_bytes_did_not(
    tmp_path, minilm_dir, before, after
):
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    for name, text in before.items():
        (source / name).write_text(text)
    assert _run(source, out, minilm_dir).returncode == 0
    for path in source.iterdir():
        path.unlink()
    for name, text in after.items():
        (source / name).write_text(text)
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "the input has changed" in resumed.stderr, resumed.stderr


@pytest.mark.parametrize("progress", ["bars", "line", True, 1, ["bar"]])
def test_embed_corpus_refuses_a_progress_it_would_not_show(tmp_path, embedder, progress):
    (tmp_path / "c.txt").write_text("x\n")
    with pytest.raises(npbert.InputError, match="progress must be 'bar', 'lines' or None"):
        stream.embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o", progress=progress)
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_read_corpus_refuses_a_run_that_has_not_completed_unless_asked(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(40, seed=3)) + "\n")
    assert _run(source, out, minilm_dir, "--shard-bytes", "500").returncode == 0
    index = json.loads((out / "index.json").read_text())
    kept = index["shards"][:2]  # as a run stopped after two shards leaves it
    texts, tokens = (sum(shard[k] for shard in kept) for k in ("texts", "tokens"))
    stopped = {**index, "shards": kept, "texts": texts, "tokens": tokens, "complete": False}
    stopped["consumed"] = {**index["consumed"], "texts": texts}  # (its bytes and hash too)
    (out / "index.json").write_text(json.dumps(stopped))
    with pytest.raises(npbert.InputError, match=f"has not completed \\(the first {texts} texts"):
        next(read_corpus(out))  # it gave the first texts as if they were all
    assert len(list(read_corpus(out, partial=True))) == texts < 40


def _linked_checkpoint(source: Path, directory: Path, changed: str | None = None) -> Path:
    """directory with a link to each of source's files but `changed`, which is copied."""
    directory.mkdir()
    for path in source.iterdir():
        if path.name == changed:
            shutil.copy(path, directory / path.name)
        else:
            (directory / path.name).symlink_to(path)
    return directory


def _rewrite_config(path: Path) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), "layer_norm_eps": 1e-5}))


def _rewrite_tensor(path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(path)
    tensors["embeddings.word_embeddings.weight"][2000] += 1  # as fine-tuning would
    save_file(tensors, path, metadata={"format": "pt"})


def _rewrite_tokenizer(path: Path) -> None:
    tokenizer = json.loads(path.read_text())
    tokenizer["normalizer"]["lowercase"] = False
    path.write_text(json.dumps(tokenizer))


def test_a_token_past_the_word_table_names_its_line_and_the_tokenizer(tmp_path, minilm_dir):
    model = _linked_checkpoint(minilm_dir, tmp_path / "m", changed="tokenizer.json")
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["hello"] = 99999  # an added id the table never grew for
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    (tmp_path / "c.txt").write_text("fine\nsay hello\n")
    result = _run(tmp_path / "c.txt", tmp_path / "o", model)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "c.txt line 2: " in result.stderr  # was "input_ids[3] = 99999 is out of range"
    assert "gives the token 'hello' the id 99999, past the model's word table" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "rewrite"),
    [
        ("config.json", _rewrite_config),
        ("model.safetensors", _rewrite_tensor),
        ("tokenizer.json", _rewrite_tokenizer),
    ],
)
def test_resume_refuses_a_checkpoint_changed_in_place(tmp_path, minilm_dir, name, rewrite):
    """The same --model path, other embeddings: resuming would mix two models' shards."""
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("One text\nAnother\n")
    model = _linked_checkpoint(minilm_dir, tmp_path / "m", changed=name)
    assert _run(source, out, model).returncode == 0
    rewrite(model / name)
    resumed = _run(source, out, model, "--resume")
    assert resumed.returncode == 2 and "other settings (checkpoint)" in resumed.stderr


@pytest.mark.slow
def test_resume_takes_the_same_checkpoint_and_input_under_other_paths(tmp_path, minilm_dir):
    (tmp_path / "in.txt").write_text("One text\n")
    _linked_checkpoint(minilm_dir, tmp_path / "m")
    first = cli("embed", "--input", "in.txt", "--out", "o", "--model", "m", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "embedded 1 text, " in first.stdout and " tokens, in 1 shard: o" in first.stdout
    with (tmp_path / "in.txt").open("a") as f:
        f.write("Another\n")
    shutil.copytree(minilm_dir, tmp_path / "copy")
    again = ["embed", "--input", "./in.txt", "--out", "o", "--model", "copy", "--resume"]
    resumed = cli(*again, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "embedded 2 texts" in resumed.stdout


@pytest.mark.slow
def test_resume_takes_the_format_given_or_read_from_the_extension_alike(tmp_path, minilm_dir):
    source = tmp_path / "in.txt"
    source.write_text('{"text": "One text"}\n')
    assert _run(source, tmp_path / "o", minilm_dir).returncode == 0
    with source.open("a") as f:
        f.write('{"text": "Another"}\n')
    resumed = _run(source, tmp_path / "o", minilm_dir, "--input-format", "txt", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "embedded 2 texts" in resumed.stdout
    as_json = _run(source, tmp_path / "o", minilm_dir, "--input-format", "jsonl", "--resume")
    assert as_json.returncode == 2 and "the input has changed since its first 2 texts" in (
        as_json.stderr
    )
    shutil.copy(source, tmp_path / "renamed.txt")  # the same bytes under another name
    renamed = _run(tmp_path / "renamed.txt", tmp_path / "o", minilm_dir, "--resume")
    assert renamed.returncode == 2 and "(their bytes, or the name or format of a file" in (
        renamed.stderr
    )


@pytest.mark.slow
def test_resume_refuses_a_run_of_another_corpus_format_by_name(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("one\ntwo\n")
    assert _run(source, out, minilm_dir).returncode == 0
    index = json.loads((out / "index.json").read_text())
    (out / "index.json").write_text(json.dumps({**index, "format": "npbert corpus, version 2"}))
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "which this npbert cannot continue" in resumed.stderr
    del index["format"]  # it said "holds None"
    (out / "index.json").write_text(json.dumps(index))
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "holds an index of no format, which" in resumed.stderr


# --- index.json damaged (item 16), bad text (item 15) -----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("content", ["", '{"format": "npbert', "[]", '{"shards": 3}', "null"])
def test_resume_with_a_damaged_index_is_one_line(finished, minilm_dir, content):
    source, out = finished("a b c\n", minilm_dir)
    (out / "index.json").write_text(content)
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "index.json" in resumed.stderr, resumed.stderr
    assert resumed.stderr.count("\n") == 1 and "Traceback" not in resumed.stderr


def _edit_bytes(index):
    index["consumed"]["bytes"] = "x"


def _edit_negative(index):
    index["consumed"]["bytes"] = -5


def _edit_float(index):
    index["consumed"]["bytes"] = 4.0


def _edit_no_bytes(index):
    index["consumed"] = {}


def _edit_texts(index):
    index["texts"] = "many"


def _edit_no_shards(index):  # with the counts left as they were: resume would overwrite
    index["shards"] = []


def _edit_no_shards_and_totals(index):
    index["shards"], index["texts"], index["tokens"] = [], 0, 0


def _edit_shard_start(index):
    index["shards"][0]["first"] = 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit_bytes, "not a whole number"),
        (_edit_negative, "not a whole number"),
        (_edit_float, "not a whole number"),
        (_edit_no_bytes, "does not say what input it holds"),
        (_edit_texts, "not a whole number"),
        (_edit_no_shards, "counts disagree"),
        (_edit_no_shards_and_totals, "counts disagree"),
        (_edit_shard_start, "counts disagree"),
    ],
)
def test_resume_refuses_an_index_whose_counts_are_damaged(finished, edit, message):
    source, out = finished("one\ntwo\n", TINY)
    shard = (out / "shard-00000.npy").read_bytes()
    index = json.loads((out / "index.json").read_text())
    edit(index)
    (out / "index.json").write_text(json.dumps(index))
    source.write_text("one\ntwo\nthree\n")
    resumed = _run(source, out, TINY, "--resume")
    assert resumed.returncode == 2 and message in resumed.stderr, resumed.stderr
    assert resumed.stderr.count("\n") == 1 and "Traceback" not in resumed.stderr
    assert (out / "shard-00000.npy").read_bytes() == shard  # left as it was


def _drop_a_shard(index):  # the texts it held would be missing without a word
    del index["shards"][0]


def _drop_the_last_shard(index):
    index["shards"].pop()


def _edit_tokens(index):
    index["tokens"] += 1


def _edit_texts_of_a_stopped_run(index):  # formatted in the "has not completed" message
    index["texts"], index["complete"] = "many", False


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit_texts_of_a_stopped_run, "not a whole number"),
        (_drop_a_shard, "lists shard-00001 in the place of shard-00000"),
        (_drop_the_last_shard, "counts disagree"),
        (_edit_tokens, "counts disagree"),
        (_edit_shard_start, "counts disagree"),
        (_edit_texts, "not a whole number"),
    ],
)
def test_read_corpus_refuses_an_index_whose_counts_are_damaged(finished, edit, message):
    _, out = finished(
        "".join(f"text number {i}\n" for i in range(40)), TINY, "--shard-bytes", "500"
    )
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) >= 2 and len(list(read_corpus(out))) == 40
    edit(index)
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(npbert.InputError, match="read_corpus: ") as caught:
        list(read_corpus(out))
    assert message in str(caught.value) and "index.json" in str(caught.value)


def _dies_on_its_second_shard(directory, name, chunk):
    if name == "shard-00001":
        os._exit(9)  # as kill -9 or the OOM killer would end it
    return local.embed_chunk.__wrapped__(directory, name, chunk)


def test_a_worker_that_dies_stops_the_run_with_one_line_and_resume_goes_on(
    tmp_path, capsys, monkeypatch
):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(40)) + "\n")
    dying = functools.wraps(local.embed_chunk)(_dies_on_its_second_shard)
    dying.__module__, dying.__qualname__ = __name__, "_dies_on_its_second_shard"
    monkeypatch.setattr(local, "embed_chunk", dying)  # the workers fork with it
    argv = ["embed", "--input", str(source), "--out", str(out), "--model", str(TINY), "--truncate"]
    code = main([*argv, "--shard-bytes", "200", "--workers", "2", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "a worker process ended abruptly" in err and "--resume" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.undo()
    assert main([*argv, "--shard-bytes", "200", "--workers", "2", "--quiet", "--resume"]) == 0
    _same_as_fresh_in_process(tmp_path, source, out)


def _same_as_fresh_in_process(tmp_path, source, out):
    fresh = tmp_path / "fresh"
    argv = [
        "embed",
        "--input",
        str(source),
        "--out",
        str(fresh),
        "--model",
        str(TINY),
        "--truncate",
    ]
    assert main([*argv, "--quiet"]) == 0
    ours, theirs = list(read_corpus(out)), list(read_corpus(fresh))
    assert len(ours) == len(theirs) == 40
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_resume_refuses_a_directory_that_lost_a_shard_file(finished):
    source, out = finished("one\ntwo\n", TINY)
    (out / "shard-00000.lengths.npy").unlink()
    source.write_text("one\ntwo\nthree\n")
    resumed = _run(source, out, TINY, "--resume")
    assert resumed.returncode == 2, resumed.stderr
    assert "has lost shard-00000.lengths.npy" in resumed.stderr, resumed.stderr


@pytest.mark.parametrize(
    ("lengths", "rows", "message"),
    [
        ([6, -1, 5], None, "least -1"),  # sums right, so slicing alone would not notice
        ([4, 3, 2], None, "sum 9"),  # one row short of the shard's rows
        ([2**63 - 1, 2**63 - 1, 12], None, "sum 10"),  # wraps around to the right sum
        (np.array([2**64 - 1, 5, 6], np.uint64), None, "sum 10"),
        ([4.0, 3.0, 3.0], None, "float64 are not a shard's"),
        ([[4, 3, 3]], None, "(1, 3) int64 are not a shard's"),
        ([5, 5], None, "(2 texts, sum 10, least 5) do not match its 10 rows and the 3 texts"),
        ([4, 3, 3], np.zeros(10, np.float32), "rows (10,) float32"),
        ("not an array", None, "not a readable .npy array"),
    ],
)
def test_read_corpus_refuses_a_shard_whose_lengths_do_not_fit(finished, lengths, rows, message):
    _, out = finished("a b\nc\nd\n", TINY)
    assert [len(rows) for rows in read_corpus(out)] == [4, 3, 3]  # [CLS] a b [SEP], ...
    shard = out / "shard-00000"
    if isinstance(lengths, str):
        Path(f"{shard}.lengths.npy").write_text(lengths)
    else:
        np.save(f"{shard}.lengths.npy", np.array(lengths))
    if rows is not None:
        np.save(f"{shard}.npy", rows)
    with pytest.raises(npbert.InputError, match="read_corpus: ") as caught:
        list(read_corpus(out))
    assert message in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (np.zeros((10, 384), np.float32), "rows are (10, 384) float32, where the index lists 10"),
        (np.zeros((10, 32), np.float16), "rows are (10, 32) float16, where the index lists 10"),
        (np.zeros((9, 32), np.float32), "rows are (9, 32) float32, where the index lists 10"),
        (b"garbage\n", "not a readable .npy array"),  # not NumPy's advice to unpickle it
        (np.array([f"{i:064d}" for i in range(320)], object).reshape(10, 32), "Python objects"),
    ],
    ids=["another model's", "another dtype", "lengths agree, index does not", "garbage", "pickle"],
)
def test_a_shard_that_is_not_this_runs_is_refused_by_read_corpus_and_resume(
    finished, rows, message
):
    source, out = finished("a b\nc\nd\n", TINY)
    if isinstance(rows, bytes):
        (out / "shard-00000.npy").write_bytes(rows)
    else:
        np.save(out / "shard-00000.npy", rows, allow_pickle=True)
    if len(rows) == 9:
        np.save(out / "shard-00000.lengths.npy", np.array([3, 3, 3]))
    with pytest.raises(npbert.InputError, match="read_corpus: ") as caught:
        list(read_corpus(out))
    assert message in str(caught.value)
    resumed = _run(source, out, TINY, "--resume")
    assert resumed.returncode == 2 and f"--resume: {out}" in resumed.stderr, resumed.stderr
    assert message in resumed.stderr and resumed.stderr.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("c.txt", b"fine\nbad \xff byte\n", "c.txt line 2: not UTF-8 text (invalid start byte"),
        ("c.txt", b"one\rtwo\rthree\r", "c.txt line 1: a carriage return (\\r) inside"),
        ("c.jsonl", b'{"text": "ok"}\n{"text": "\\ud800"}\n', "c.jsonl line 2: 'text' is not"),
        ("c.jsonl", b'{"text": "ok", "pair": "x\\udfff"}\n', "c.jsonl line 1: 'pair' is not"),
        ("c.jsonl", b'{"text": "ok"}\n\xc3\x28\n', "c.jsonl line 2: not UTF-8 text"),
        # what `echo text > c.txt` writes in Windows PowerShell 5
        (
            "c.txt",
            "one\ntwo\n".encode("utf-16"),
            "c.txt line 1: not UTF-8 text but UTF-16 (it "
            "begins with UTF-16's byte order mark): convert it, e.g. iconv -f UTF-16 -t UTF-8",
        ),
        (
            "c.txt",
            "one\n".encode("utf-32"),  # its mark begins as UTF-16's
            "c.txt line 1: not UTF-8 text but UTF-32 (it "
            "begins with UTF-32's byte order mark): convert it, e.g. iconv -f UTF-32 -t UTF-8",
        ),
    ],
)
def test_bad_unicode_names_the_line(tmp_path, minilm_dir, name, content, message):
    (tmp_path / name).write_bytes(content)
    result = _run(tmp_path / name, tmp_path / "o", minilm_dir)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()  # refused before its first shard: nothing left


# --- workers, formats, dtype, paths -------------------------------------------------------------


def _pairs_corpus(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    texts = corpus_lines(count, seed=seed)
    return [
        {"text": t, "pair": texts[-1 - i]} if rng.random() < 0.3 else {"text": t}
        for i, t in enumerate(texts)
    ]


@pytest.mark.slow
def test_two_workers_write_what_one_writes_bit_for_bit(tmp_path, embedder):
    from npbert.stream import embed_corpus

    items = _pairs_corpus(400, seed=7)
    source = tmp_path / "c.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    one = embed_corpus(embedder, str(source), str(tmp_path / "one"), workers=1, shard_bytes=900)
    two = embed_corpus(embedder, source, tmp_path / "two", workers=2, shard_bytes=900)
    assert one["shards"] == two["shards"] and len(one["shards"]) > 5
    for item, a, b in zip(items, read_corpus(tmp_path / "one"), read_corpus(str(tmp_path / "two")),
                          strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, embedder(item["text"], item.get("pair")).embeddings)


@pytest.mark.slow
def test_a_run_of_many_shards_neither_rewrites_the_index_nor_lists_the_directory_per_shard(
    tmp_path, embedder, monkeypatch
):
    """Both cost time in the number of shards so far: a run of 2,184 shards took 55 s, most
    of it rewriting index.json and listing the directory for stale temporaries."""
    from npbert import atomic

    calls = {"index": 0, "sweep": 0}

    def counting(key, function):
        def counted(*args, **kwargs):
            calls[key] += 1
            return function(*args, **kwargs)

        return counted

    from npbert.stream import index as output

    monkeypatch.setattr(stream, "write_index", counting("index", stream.write_index))
    monkeypatch.setattr(output, "write_index", counting("index", output.write_index))
    monkeypatch.setattr(atomic, "remove_stale", counting("sweep", atomic.remove_stale))
    source = tmp_path / "c.txt"
    source.write_text("\n".join(corpus_lines(300, seed=9)) + "\n")
    started = time.monotonic()
    index = stream.embed_corpus(embedder, source, tmp_path / "o", shard_bytes=100, workers=1)
    seconds = time.monotonic() - started
    assert len(index["shards"]) > 100 and calls["sweep"] == 0
    assert calls["index"] <= 2 + seconds / stream.INDEX_EVERY  # the first, the last, one a second
    assert index["texts"] == 300 == sum(1 for _ in read_corpus(tmp_path / "o"))


@pytest.mark.slow
def test_float16_halves_the_output(tmp_path, embedder):
    from npbert.stream import embed_corpus

    source = tmp_path / "c.txt"
    source.write_text("\n".join(corpus_lines(50, seed=8)) + "\n")
    embed_corpus(embedder, source, tmp_path / "32")
    embed_corpus(embedder, source, tmp_path / "16", dtype="float16")
    size = {d: (tmp_path / d / "shard-00000.npy").stat().st_size for d in ("32", "16")}
    assert size["16"] - 128 == (size["32"] - 128) // 2  # .npy headers are 128 bytes
    for a, b in zip(read_corpus(tmp_path / "32"), read_corpus(tmp_path / "16"), strict=True):
        assert b.dtype == np.float16
        np.testing.assert_array_equal(b, a.astype(np.float16))


@pytest.mark.slow
def test_parquet_input_equals_jsonl_input(tmp_path, embedder):
    import pyarrow as pa  # the test extra brings it, with ray[data]
    import pyarrow.parquet as pq

    from npbert.stream import embed_corpus

    items = _pairs_corpus(300, seed=9)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    table = pa.table({"text": [i["text"] for i in items], "pair": [i.get("pair") for i in items]})
    (tmp_path / "dir").mkdir()
    pq.write_table(table.slice(0, 120), tmp_path / "dir" / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(120), tmp_path / "dir" / "b.parquet", row_group_size=50)
    embed_corpus(embedder, tmp_path / "c.jsonl", tmp_path / "j", shard_bytes=1000)
    index = embed_corpus(embedder, tmp_path / "dir", tmp_path / "p", shard_bytes=1000)
    assert index["texts"] == len(items) and len(index["shards"]) > 4
    for a, b in zip(read_corpus(tmp_path / "j"), read_corpus(tmp_path / "p"), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_parquet_chunk_converts_only_its_own_rows(tmp_path, monkeypatch):
    """A file of one row group (pyarrow's and pandas' default holds up to 1Mi rows): each
    chunk made Python strings of the whole group, a run quadratic in the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from npbert.stream import chunks, files, parquet, records

    texts = [f"text {i}" for i in range(20_000)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "c.parquet")
    pieces = list(chunks.chunks(files.input_files(tmp_path / "c.parquet", None), 4096, None))
    converted = []
    batch_rows = parquet._batch_rows
    monkeypatch.setattr(
        parquet, "_batch_rows", lambda *a: converted.append(a[1].num_rows) or batch_rows(*a)
    )
    read = [record.text for chunk in pieces for record in records.read_chunk(chunk)]
    assert len(pieces) > 10 and read == texts and sum(converted) == len(texts)


@pytest.mark.slow
def test_parquet_of_categorical_strings_equals_plain_strings(tmp_path, embedder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from npbert.stream import embed_corpus

    texts, pairs = ["a first text", "another", "a first text"], ["x", None, "y"]
    plain = pa.table({"text": texts, "pair": pairs})
    categorical = pa.table({name: plain[name].dictionary_encode() for name in ("text", "pair")})
    assert str(categorical.schema.field("text").type).startswith("dictionary<values=string")
    pq.write_table(plain, tmp_path / "plain.parquet")
    pq.write_table(categorical, tmp_path / "categorical.parquet")  # pandas' category dtype
    embed_corpus(embedder, tmp_path / "plain.parquet", tmp_path / "p")
    embed_corpus(embedder, tmp_path / "categorical.parquet", tmp_path / "c")
    ours, theirs = list(read_corpus(tmp_path / "c")), list(read_corpus(tmp_path / "p"))
    assert len(ours) == 3 and all(map(np.array_equal, ours, theirs))


@pytest.mark.slow
def test_parquet_with_two_text_columns_is_refused_by_name(tmp_path, minilm_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table([pa.array(["a", "b"]), pa.array(["c", "d"])], names=["text", "text"])
    pq.write_table(table, tmp_path / "c.parquet")
    result = _run(tmp_path / "c.parquet", tmp_path / "o", minilm_dir)
    assert result.returncode == 2 and "c.parquet has 2 columns named 'text'" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.slow
def test_parquet_without_a_text_column(tmp_path, minilm_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a", "b"]}), tmp_path / "c.parquet")
    result = _run(tmp_path / "c.parquet", tmp_path / "o", minilm_dir)
    assert result.returncode == 2 and "c.parquet has no 'text' column (its columns: body)" in (
        result.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("column", "values", "kind"),
    [
        ("text", [1, 2], "int64"),
        ("text", [["a"], ["b"]], "list<element: string>"),  # value_type string, not a string
        ("pair", [["a"], ["b"]], "list<element: string>"),
    ],
)
def test_parquet_column_of_no_strings_is_refused_at_start(tmp_path, column, values, kind):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = {"text": ["a", "b"], column: values}
    pq.write_table(pa.table(table), tmp_path / "c.parquet")
    result = _run(tmp_path / "c.parquet", tmp_path / "o", TINY)
    assert result.returncode == 2, result.stderr
    error = f"c.parquet: column '{column}' holds {kind}, not strings"
    assert result.stderr == f"npbert: error: {error}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_every_family_streams_what_it_embeds_alone(tmp_path):
    from npbert.stream import embed_corpus

    texts = ["hello world", "", "a longer text about the layer of embeddings", "hi"]
    checked = 0
    for model in sorted((Path(__file__).parent / "data").glob("tiny-*")):
        if not (model / "tokenizer.json").is_file() and not (model / "vocab.txt").is_file():
            continue  # RoFormer's jieba tokenizer cannot be saved (its goldens start from ids)
        embedder = npbert.Embedder.from_pretrained(model)
        source = tmp_path / f"{model.name}.txt"
        source.write_text("\n".join(texts) + "\n")
        embed_corpus(embedder, source, tmp_path / model.name, shard_bytes=20, workers=1)
        for text, rows in zip(texts, read_corpus(tmp_path / model.name), strict=True):
            np.testing.assert_array_equal(rows, embedder(text).embeddings, err_msg=model.name)
        checked += 1
    assert checked >= 15


def test_status_lines_without_a_terminal(capsys):
    from npbert.stream.progress import Progress

    progress = Progress("lines", total=4 << 20, every=0)
    progress.update(1 << 20, 5000)
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "25%" in line and "1.00M/4.00M" in line and "5,000" in line
    Progress("lines", total=None, every=0).update(10, 1)
    assert "%" not in capsys.readouterr().err


@pytest.mark.slow
def test_quiet_prints_nothing_on_stderr(tmp_path, minilm_dir):
    (tmp_path / "c.txt").write_text("one\ntwo\n")
    result = _run(tmp_path / "c.txt", tmp_path / "o", minilm_dir, "--quiet")
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.slow
def test_the_local_job_never_imports_ray(tmp_path, minilm_dir):
    (tmp_path / "c.txt").write_text("one\ntwo\n")
    code = (
        "import sys, npbert\n"
        "from npbert.stream.corpus import embed_corpus, read_corpus\n"
        f"e = npbert.Embedder.from_pretrained({str(minilm_dir)!r})\n"
        f"embed_corpus(e, {str(tmp_path / 'c.txt')!r}, {str(tmp_path / 'o')!r})\n"
        f"list(read_corpus({str(tmp_path / 'o')!r}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'pyarrow')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- a directory that is not npbert's -----------------------------------------------------------

USERS = {".notes.tmp": "mine", ".shard-plan.txt": "mine too", "report.txt": "and this"}


@pytest.mark.slow
def test_resume_refuses_a_directory_that_is_not_a_corpus_and_leaves_it_alone(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b c\n")
    out.mkdir()
    for name, text in USERS.items():
        (out / name).write_text(text)
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "has no index.json but holds other files" in resumed.stderr
    assert resumed.stderr.count("\n") == 1
    assert {p.name: p.read_text() for p in out.iterdir()} == USERS


@pytest.mark.slow
def test_resume_in_a_directory_of_one_other_file_names_it_alone(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b c\n")
    out.mkdir()
    (out / "report.txt").write_text("mine")
    resumed = _run(source, out, minilm_dir, "--resume")
    assert resumed.returncode == 2 and "holds other files (report.txt): " in resumed.stderr


@pytest.mark.slow
def test_a_run_removes_only_npbert_s_own_leftovers(tmp_path, minilm_dir):
    source, out = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(40, seed=3)) + "\n")
    assert _run(source, out, minilm_dir, "--shard-bytes", "500").returncode == 0
    for name, text in USERS.items():
        (out / name).write_text(text)
    leftovers = [".shard-00099.npy", ".shard-00099.lengths.npy", ".index.json.npbert-0a1b2c3d.tmp"]
    for name in leftovers:
        (out / name).write_bytes(b"")
    with source.open("a") as f:
        f.write("one more line\n")
    assert _run(source, out, minilm_dir, "--shard-bytes", "500", "--resume").returncode == 0
    assert not any((out / name).exists() for name in leftovers)
    assert all((out / name).read_text() == text for name, text in USERS.items())


@pytest.mark.slow
def test_the_corpus_job_keeps_to_the_centered_table_s_mode(tmp_path, minilm_dir, monkeypatch):
    """It makes Wc up front, for its workers to share, only where "auto" would make it."""
    from npbert.layer import tables
    from npbert.stream import embed_corpus

    source = tmp_path / "c.txt"
    source.write_text("\n".join(corpus_lines(20, seed=9)) + "\n")
    never = npbert.Embedder.from_pretrained(minilm_dir)
    tables.centered_table(never.weights, "never")
    embed_corpus(never, source, tmp_path / "never", workers=1)
    assert tables.derived(never.weights).words is None
    auto = npbert.Embedder.from_pretrained(minilm_dir)
    embed_corpus(auto, source, tmp_path / "auto", workers=1)
    assert tables.derived(auto.weights).words is not None
    monkeypatch.setattr(tables, "AUTO_LIMIT", auto.weights.word_embeddings.nbytes - 1)
    too_big = npbert.Embedder.from_pretrained(minilm_dir)
    embed_corpus(too_big, source, tmp_path / "too big", workers=1)
    assert tables.derived(too_big.weights).words is None


# --- what the input is taken for ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "extra", "message"),
    [
        ({"c.csv": b"text\nhello\n"}, (), "c.csv: .csv extension; name it .txt, .jsonl or"),
        ({"corpus": b"hello\n"}, (), "corpus: no extension"),
        ({"c.jsonl": b'{"text": "a"}\n'}, ("--input-format", "csv"), "invalid choice: 'csv'"),
    ],
)
def test_an_input_of_no_known_format_is_refused_not_read_as_text(tmp_path, files, extra, message):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    result = _run(tmp_path / next(iter(files)), tmp_path / "o", TINY, *extra)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_extensions_are_matched_in_any_case(tmp_path, embedder):
    from npbert.stream import embed_corpus
    from npbert.stream.files import input_files

    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.TXT").write_text("one\n")
    (tmp_path / "dir" / "b.JSONL").write_text('{"text": "two"}\n')
    assert [f for _, f in input_files(tmp_path / "dir", None)] == ["txt", "jsonl"]
    message = "input_format must be the name 'txt', 'jsonl' or 'parquet', got 'csv'"
    with pytest.raises(npbert.InputError, match=message):
        embed_corpus(embedder, tmp_path / "dir", tmp_path / "o", input_format="csv")
    assert not (tmp_path / "o").exists()
    embed_corpus(embedder, tmp_path / "dir", tmp_path / "o")
    for text, rows in zip(["one", "two"], read_corpus(tmp_path / "o"), strict=True):
        np.testing.assert_array_equal(rows, embedder(text).embeddings)


@pytest.mark.slow
def test_a_directory_input_names_what_it_does_not_read(tmp_path):
    (tmp_path / "dir" / "2024").mkdir(parents=True)
    (tmp_path / "dir" / "2024" / "b.txt").write_text("not read\n")
    for name in ("a.txt", "notes.md", "_SUCCESS", ".a.txt.crc"):
        (tmp_path / "dir" / name).write_text("one\n")
    result = _run(tmp_path / "dir", tmp_path / "o", TINY)
    assert result.returncode == 0, result.stderr
    assert "embedded 1 text," in result.stdout
    warning = "reads only its .txt, .jsonl and .parquet files, not 2024/, notes.md\n"
    assert result.stderr == f"npbert: warning: --input {tmp_path / 'dir'}: {warning}"
    (tmp_path / "dir" / "notes.md").unlink()
    shutil.rmtree(tmp_path / "dir" / "2024")
    quiet = _run(tmp_path / "dir", tmp_path / "p", TINY)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.slow
def test_a_subdirectory_named_as_a_file_of_texts_is_left_out_as_the_others(tmp_path):
    """A subdirectory named x.txt stopped the run ("is a directory: give a file"): one made
    by --out corpus/emb.txt, for one, made every --resume fail."""
    (tmp_path / "dir" / "emb.txt").mkdir(parents=True)
    (tmp_path / "dir" / "a.txt").write_text("one\n")
    result = _run(tmp_path / "dir", tmp_path / "o", TINY)
    assert result.returncode == 0, result.stderr
    assert "embedded 1 text," in result.stdout and "not emb.txt/\n" in result.stderr


@pytest.mark.slow
def test_a_link_to_nothing_in_a_directory_input_is_refused_before_any_output(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_text("one\n")
    (tmp_path / "dir" / "b.txt").symlink_to(tmp_path / "gone.txt")
    result = _run(tmp_path / "dir", tmp_path / "o", TINY)
    assert result.returncode == 2
    assert result.stderr == f"npbert: error: --input {tmp_path / 'dir' / 'b.txt'}: no such file\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["c.txt", "c.jsonl"])
def test_a_byte_order_mark_is_not_text(tmp_path, embedder, name):
    from npbert.stream import embed_corpus

    line = "hello" if name == "c.txt" else '{"text": "hello"}'
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + f"{line}\n{line}\n".encode())
    embed_corpus(embedder, tmp_path / name, tmp_path / "o")
    first, second = read_corpus(tmp_path / "o")
    np.testing.assert_array_equal(first, second)


@pytest.mark.slow
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "c.txt")
    argv = ("embed", "--input", tmp_path / "c.txt", "--out", tmp_path / "o", "--model", TINY)
    result = cli(*argv, timeout=60)
    assert result.returncode == 2 and "c.txt: not a regular file" in result.stderr, result.stderr
    assert "for standard input, give --input -" in result.stderr  # <(cmd), /dev/stdin


@pytest.mark.slow
def test_a_parquet_row_of_null_text_is_named_counting_from_0(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one", None]}), tmp_path / "c.parquet")
    result = _run(tmp_path / "c.parquet", tmp_path / "o", TINY)
    assert result.returncode == 2, result.stderr
    assert "c.parquet row 1 (from 0): 'text' is null" in result.stderr, result.stderr


@pytest.mark.parametrize("path", ["/proc/self/status", "/sys/devices/system/cpu/online"])
def test_pseudo_files_carry_their_bytes(path):
    """/sys files say they hold 4,096 bytes: read again by a worker, one that had changed was
    refused ("run again", which could never work), as /proc files were."""
    from npbert.stream.chunks import chunks

    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    first = next(chunks([(path, "txt")], 1 << 16))
    assert first.data is not None and len(first.data) == first.stop - first.start


@pytest.mark.slow
def test_a_damaged_parquet_file_is_one_line_naming_it(tmp_path):
    """Bytes of a data page that do not decode were a traceback (pyarrow's ArrowInvalid)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    table = pa.table({"text": [f"text number {i}" for i in range(2000)]})
    pq.write_table(table, path, compression="none", row_group_size=500, use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(3).column(0)  # the last group's texts
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[middle : middle + 64] = b"\xff" * 64  # value lengths of 4 GiB, among others
    path.write_bytes(data)
    result = _run(path, tmp_path / "o", TINY)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("npbert: error: --input c.parquet: a damaged Parquet file (")
    assert result.stderr.count("\n") == 1, result.stderr


def test_embed_corpus_wants_an_embedder(tmp_path, embedder):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    with pytest.raises(npbert.InputError, match="embedder must be npbert's Embedder"):
        embed_corpus(embedder.weights, tmp_path / "c.txt", tmp_path / "o")  # AttributeError
    assert not (tmp_path / "o").exists()


def test_a_huge_shard_size_reads_in_blocks(tmp_path, embedder):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\ntwo\n")
    index = embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o", shard_bytes=10**19)
    assert index["texts"] == 2 and len(index["shards"]) == 1


@pytest.mark.slow
def test_parquet_text_that_is_not_utf8_names_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = pa.array([b"fine"] * 5000 + [b"\xff\xfe"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts}), tmp_path / "c.parquet")
    result = _run(tmp_path / "c.parquet", tmp_path / "o", TINY)
    assert (
        result.returncode == 2 and "c.parquet row 5000 (from 0): not UTF-8 text" in result.stderr
    ), result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"truncation": "no"}, "truncation must be True or False, got 'no'"),
        ({"dtype": "float64"}, "dtype must be the name 'float32' or 'float16', got 'float64'"),
        # equal to "float16", it passed, and the index could not be written as JSON
        ({"dtype": np.dtype("float16")}, r"dtype must be the name .*, got dtype\('float16'\)"),
    ],
)
def test_the_local_job_checks_its_settings_as_ray_does(tmp_path, embedder, options, message):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    with pytest.raises(npbert.InputError, match=message):
        embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o", **options)


@pytest.mark.slow
def test_a_numpy_bool_truncation_runs_the_job(tmp_path, embedder):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o", truncation=np.True_)
    written = json.loads((tmp_path / "o" / "index.json").read_text())
    assert written["truncation"] is True and written["complete"] and written["tokens"] > 0


@pytest.mark.parametrize("truncation", ["no", 1, None])
def test_the_embedders_truncation_must_be_true_or_false(embedder, truncation):
    # "no" is true: the text was cut where the caller said not to cut it.
    for call in (embedder, embedder.encode, embedder.embed_each):
        with pytest.raises(npbert.InputError, match="truncation must be True or False"):
            call(["one two"], truncation=truncation)


@pytest.mark.parametrize(
    ("call", "keyword"),
    [
        ("load_weights", "full"),
        ("load_weights", "local_files_only"),
        ("from_pretrained", "full"),
        ("embed_corpus", "resume"),
        ("embed_each", "show_progress_bar"),
    ],
)
def test_other_flags_must_be_true_or_false_too(tmp_path, embedder, call, keyword):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    calls = {
        "load_weights": lambda **kw: npbert.load_weights(TINY, **kw),
        "from_pretrained": lambda **kw: npbert.Embedder.from_pretrained(TINY, **kw),
        "embed_corpus": lambda **kw: embed_corpus(embedder, tmp_path / "c.txt", tmp_path, **kw),
        "embed_each": lambda **kw: embedder.embed_each(["one"], **kw),
    }
    with pytest.raises(npbert.InputError, match=f"{keyword} must be True or False, got 'no'"):
        calls[call](**{keyword: "no"})


@pytest.mark.slow
def test_an_empty_output_directory_is_refused_not_taken_as_the_current_one(
    tmp_path, embedder, monkeypatch
):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    monkeypatch.chdir(tmp_path)
    result = _run(tmp_path / "c.txt", "", TINY)
    assert result.returncode == 2 and "argument --out: is empty" in result.stderr
    with pytest.raises(npbert.InputError, match="the output directory is empty"):
        embed_corpus(embedder, tmp_path / "c.txt", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


@pytest.mark.parametrize("argument", ["source", "directory", "read_corpus", "model"])
def test_a_path_argument_that_is_not_a_path_is_named(tmp_path, embedder, argument):
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    calls = {
        "source": lambda: embed_corpus(embedder, None, tmp_path / "o"),
        "directory": lambda: embed_corpus(embedder, tmp_path / "c.txt", 3),
        "read_corpus": lambda: next(read_corpus(None)),
        "model": lambda: npbert.load_weights(None),
    }
    name = {"read_corpus": "directory"}.get(argument, argument)
    with pytest.raises(npbert.InputError, match=f"^{name} must be a path .*, got (None|3)$"):
        calls[argument]()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_workers_past_a_few_per_core_are_refused_before_any_fork(tmp_path, embedder, monkeypatch):
    from npbert.stream import CorpusSettings

    monkeypatch.setattr(local, "cpus", lambda: 2)
    monkeypatch.setattr(local, "worker_pool", None)  # would fail if the job got that far
    (tmp_path / "c.txt").write_text("one\n")
    limit = 2 * local.WORKERS_PER_CORE
    with pytest.raises(npbert.InputError, match=f"workers={limit + 1}: more than .* the 2 cores"):
        stream.embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o", workers=limit + 1)
    assert not (tmp_path / "o").exists()
    assert local.LocalEngine(embedder, CorpusSettings(workers=limit)).workers == limit


def test_an_output_directory_that_is_a_dangling_symlink_is_named_so(tmp_path, embedder):
    # mkdir said "File exists" of it, where nothing seems to exist.
    from npbert.stream import embed_corpus

    (tmp_path / "c.txt").write_text("one\n")
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    with pytest.raises(npbert.InputError, match=r"is a symbolic link to .*nowhere, which does not"):
        embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "out")
    (tmp_path / "nowhere").mkdir()  # where it points: written there
    assert embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "out")["complete"]
    assert (tmp_path / "nowhere" / "index.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_file_of_only_a_byte_order_mark_holds_no_text_when_resumed_too(tmp_path, suffix):
    """An empty file saved by a Windows editor is 3 bytes, the BOM: it was one empty text."""
    line = "hello" if suffix == ".txt" else '{"text": "hello"}'
    source, out = tmp_path / "in", tmp_path / "o"
    source.mkdir()
    (source / f"a{suffix}").write_bytes(b"\xef\xbb\xbf")
    (source / f"b{suffix}").write_text(f"{line}\n")
    first = _run(source, out, TINY)
    assert first.returncode == 0 and "embedded 1 text," in first.stdout, first.stdout
    (source / f"c{suffix}").write_text(f"{line}\n{line}\n")
    (source / f"a{suffix}").write_bytes(b"\xef\xbb\xbf" + f"{line}\n".encode())  # grew
    resumed = _run(source, out, TINY, "--resume")
    assert resumed.returncode == 2 and "has changed since" in resumed.stderr, resumed.stderr
    (source / f"a{suffix}").write_bytes(b"\xef\xbb\xbf")
    resumed = _run(source, out, TINY, "--resume")
    assert resumed.returncode == 0 and "embedded 3 texts" in resumed.stdout, resumed.stderr
    index = json.loads((out / "index.json").read_text())  # the BOM read again, no text
    assert index["texts"] == index["consumed"]["texts"] == 3
    (source / f"d{suffix}").write_text(f"{line}\n")
    again = _run(source, out, TINY, "--resume")  # the counts agree: it goes on
    assert again.returncode == 0 and "embedded 4 texts" in again.stdout, again.stderr
    _same_as_fresh(tmp_path, source, out, TINY)


@pytest.mark.slow
def test_a_damaged_parquet_file_is_one_line(tmp_path, minilm_dir):
    """pyarrow's message for a damaged file ends in a newline: the error ran over two."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", "b"] * 50}), tmp_path / "c.parquet")
    data = bytearray((tmp_path / "c.parquet").read_bytes())
    data[4:-8] = bytes(len(data) - 12)  # its magic bytes kept, all else zeros
    (tmp_path / "c.parquet").write_bytes(bytes(data))
    result = _run(tmp_path / "c.parquet", tmp_path / "o", minilm_dir)
    assert result.returncode == 2 and "c.parquet: not a readable Parquet file" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_file_still_being_written_is_read_as_it_was_not_split_mid_line(tmp_path):
    """The file's end, inside a line, was taken as that line's end, and the job read on: the
    rest of the line, written meanwhile, became a text of its own ("hel", "lo world")."""
    from npbert.stream import chunks, records

    path = tmp_path / "growing.txt"
    path.write_bytes(b"first line\nhel")  # a writer is in the middle of a line
    pieces = chunks.chunks([(str(path), "txt")], 1 << 16)
    first = next(pieces)
    with path.open("ab") as file:
        file.write(b"lo world\nlast\n")
    texts = [record.text for chunk in [first, *pieces] for record in records.read_chunk(chunk)]
    assert texts == ["first line", "hel"]


@pytest.mark.slow
@pytest.mark.parametrize(("number", "code", "line"), [("SIGINT", 130, "interrupted"),
                                                      ("SIGTERM", 143, "terminated")])  # fmt: skip
def test_a_stop_while_the_workers_are_forked_stops_the_run(tmp_path, number, code, line):
    """Its handler raised inside an at-fork hook, where Python drops the exception: the run
    went on to the end (exit 0) with a traceback, and ignored every later Ctrl-C."""
    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(200, longest=20)) + "\n")
    script = (
        "import os, signal, sys\n"
        "from npbert.cli import main\n"
        "sent = []\n"
        "def stop():\n"  # as if the signal came in the middle of the first fork
        "    if not sent:\n"
        f"        sent.append(os.kill(os.getpid(), signal.{number}))\n"
        "os.register_at_fork(after_in_parent=stop)\n"
        f"sys.exit(main(['embed', '--input', 'c.txt', '--out', 'o', '--model', {str(TINY)!r},\n"
        "                '--workers', '2', '--shard-bytes', '500', '--quiet']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert (result.returncode, result.stderr) == (code, f"npbert: {line}\n")
    assert not (tmp_path / "o").exists()  # stopped before its first shard: nothing left


def test_stops_held_leaves_alone_a_handler_set_outside_python(monkeypatch):
    """signal.signal(n, None), to put such a handler back, is a TypeError: embed_corpus in a
    process embedding Python would have failed to start its workers."""
    real = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda n: None if n == signal.SIGTERM else real(n))
    before = real(signal.SIGTERM), real(signal.SIGINT)
    with stops.stops_held():
        assert real(signal.SIGTERM) is before[0] and real(signal.SIGINT) is not before[1]
    assert (real(signal.SIGTERM), real(signal.SIGINT)) == before


def test_stops_held_puts_every_handler_back_if_a_stop_comes_between_two(monkeypatch):
    """A Ctrl-C handled just after the first handler was put back left the other on the one
    that notes: later SIGTERMs were noted, never handled."""
    real = signal.signal
    calls = []

    def stopped_once_back(number, handler):  # the first put back, then a Ctrl-C
        previous = real(number, handler)
        calls.append(number)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return previous

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(signal, "signal", stopped_once_back)
    with pytest.raises(KeyboardInterrupt), stops.stops_held():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_stop_in_the_middle_of_a_commit_leaves_an_index_that_resumes(tmp_path, monkeypatch):
    """Ctrl-C after a shard was listed but before the counts were: the index written on the
    way out disagreed with itself, and every --resume refused it."""

    class Listed(list):  # Ctrl-C as the shard is listed
        def append(self, shard):
            super().append(shard)
            if len(self) == 2:
                os.kill(os.getpid(), signal.SIGINT)

    start_index = stream.start_index
    monkeypatch.setattr(
        stream, "start_index", lambda *a: {**(i := start_index(*a)), "shards": Listed(i["shards"])}
    )
    embedder = npbert.Embedder.from_pretrained(TINY)
    source = tmp_path / "c.txt"
    source.write_text("\n".join(corpus_lines(60, seed=2, longest=20)) + "\n")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            stream.embed_corpus(embedder, source, tmp_path / "o", shard_bytes=300, workers=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    stream.embed_corpus(embedder, source, tmp_path / "o", shard_bytes=300, resume=True)
    fresh = tmp_path / "fresh"
    stream.embed_corpus(embedder, source, fresh, shard_bytes=300)
    for ours, theirs in zip(read_corpus(tmp_path / "o"), read_corpus(fresh), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_a_resumed_parquet_run_starts_its_progress_at_its_rows_share_of_the_file(
    tmp_path, monkeypatch, embedder
):
    """The bar started at the bytes of JSON the rows done were hashed as, against the file's
    size: no percentage, and past 100% before the end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from npbert.stream.chunks import Consumed
    from npbert.stream.parquet import row_bytes

    texts = corpus_lines(200, seed=8, longest=30)
    source, out = tmp_path / "c.parquet", tmp_path / "o"
    pq.write_table(pa.table({"text": texts}), source)
    stream.embed_corpus(embedder, source, out, shard_bytes=2000)
    index = json.loads((out / "index.json").read_text())
    kept = index["shards"][:3]  # as if stopped after three shards
    done = sum(s["texts"] for s in kept)
    consumed = Consumed()
    consumed.start_file(str(source), "parquet")
    consumed.add(b"".join(row_bytes(t, None) for t in texts[:done]), done)
    index.update(shards=kept, texts=done, tokens=sum(s["tokens"] for s in kept), complete=False)
    (out / "index.json").write_text(json.dumps({**index, "consumed": consumed.state()}))
    started = []
    progress = stream.Progress
    monkeypatch.setattr(stream, "Progress", lambda *a: started.append(a) or progress(None, *a[1:]))
    stream.embed_corpus(embedder, source, out, shard_bytes=2000, resume=True)
    size = source.stat().st_size
    assert started == [(None, size, size * done // len(texts))]
    assert consumed.state()["bytes"] != size * done // len(texts)  # the units that were used


def test_resume_removes_shards_a_killed_run_committed_but_did_not_list(tmp_path, embedder):
    """Left by kill -9 in the second before the index was written: where the input then ended
    sooner, they stayed for good, unlisted."""
    source, out = tmp_path / "c.txt", tmp_path / "o"
    source.write_text("\n".join(corpus_lines(40, seed=9)) + "\n")
    stream.embed_corpus(embedder, source, out, shard_bytes=300)
    listed = json.loads((out / "index.json").read_text())["shards"]
    stale = [out / f"shard-{len(listed) + 5:05d}{suffix}.npy" for suffix in SHARD_FILES.values()]
    for path in stale:
        shutil.copy(out / f"shard-00000{path.name[11:]}", path)
    stream.embed_corpus(embedder, source, out, shard_bytes=300, resume=True)
    assert not any(path.exists() for path in stale)
    assert len(list(read_corpus(out))) == 40


def test_a_proc_file_is_embedded_as_read_once(tmp_path, minilm_dir):
    """/proc/self/status says it holds 0 bytes and gives each reader its own: the workers, which
    read each chunk's bytes again, found them changed ("run again", which could never work)."""
    out = tmp_path / "o"
    result = _run("/proc/self/status", out, minilm_dir, "--input-format", "txt", "--workers", "2")
    assert result.returncode == 0, result.stderr
    index = json.loads((out / "index.json").read_text())
    assert index["texts"] > 5 and len(list(read_corpus(out))) == index["texts"]


def _corpus_in_a_pool_worker(directory: str) -> str:
    embedder = npbert.Embedder.from_pretrained(TINY)
    source = Path(directory) / "in.txt"
    try:
        stream.embed_corpus(embedder, source, Path(directory) / "out", workers=1)
    except npbert.InputError as error:
        return str(error)
    return "embedded"


def test_the_corpus_job_in_a_daemonic_process_is_refused_before_it_writes(tmp_path):
    """A multiprocessing.Pool's workers may not have children: the job's workers failed
    with multiprocessing's AssertionError, and left a directory that only --resume took."""
    import multiprocessing

    (tmp_path / "in.txt").write_text("a b\n")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        said = pool.apply_async(_corpus_in_a_pool_worker, (str(tmp_path),)).get(timeout=120)
    assert "a daemonic process (a multiprocessing.Pool's worker) may not" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", ["txt", "parquet"])
def test_input_changed_while_embedded_says_to_start_again_elsewhere(tmp_path, suffix):
    """It said "run again", which the output directory refuses, and --resume too."""
    import dataclasses

    from npbert.stream import chunks, files, records

    path = tmp_path / f"c.{suffix}"
    if suffix == "txt":
        path.write_text("a b\nc d\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": ["a b", "c d"]}), path)
    chunk = next(iter(chunks.chunks(files.input_files(path, None), 4096, None)))
    changed = dataclasses.replace(chunk, sha256="0" * 64)
    with pytest.raises(npbert.InputError, match="embed it again into a new directory"):
        records.read_chunk(changed)
