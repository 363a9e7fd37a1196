"""The corpus job's start and end: a run that commits no shard leaves nothing in the way of
the retry its error asks for; SIGHUP stops a run as SIGTERM does; an index that disagrees
with itself is refused by name, not read short."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY
from test_stream import _children, _ended_cleanly, _running, corpus_lines

import npbert
from npbert.cli import main
from npbert.stream import read_corpus

LONG = " ".join(["word"] * 700)  # more tokens than tiny-bert's 128 positions


def embed(capsys, source, out, *options) -> tuple[int, str]:
    argv = ["embed", "--input", str(source), "--out", str(out), "--model", str(TINY)]
    code = main([*argv, "--quiet", *options])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("exists", [False, True])
@pytest.mark.parametrize("retry", [["--truncate"], ["--truncate", "--resume"],
                                   ["--truncate", "--dtype", "float16"]])  # fmt: skip
def test_the_retry_a_refused_first_text_asks_for_works(tmp_path, capsys, exists, retry):
    """A first run refused on its first text left an index of its settings: the retry with
    --truncate, as its error said, was told to pass --resume, and then that the settings
    differ."""
    source, out = tmp_path / "long.txt", tmp_path / "out"
    source.write_text(f"{LONG}\nshort\n")
    if exists:
        out.mkdir()
    code, err = embed(capsys, source, out)
    assert code == 2 and "pass --truncate" in err, err
    assert sorted(out.iterdir()) == [] if exists else not out.exists()  # nothing left
    code, err = embed(capsys, source, out, *retry)
    assert code == 0, err
    limit = json.loads((TINY / "config.json").read_text())["max_position_embeddings"]
    lengths = [len(rows) for rows in read_corpus(out)]
    assert len(lengths) == 2 and lengths[0] == limit


@pytest.mark.parametrize("out", ["a/b/out", "a/n/../out"])
def test_a_directory_made_for_a_run_that_wrote_nothing_is_removed_with_its_parents(
    tmp_path, capsys, monkeypatch, out
):
    monkeypatch.chdir(tmp_path)
    Path("long.txt").write_text(f"{LONG}\n")
    Path("a").mkdir()
    assert embed(capsys, "long.txt", out)[0] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "long.txt"]
    assert not any(Path("a").iterdir())  # made by the run: gone; there before: kept


def test_an_engine_that_cannot_be_imported_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    """--engine ray without Ray wrote index.json first: the same command without it was then
    told to pass --resume."""
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("one\ntwo\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # an import of it raises ImportError
    code, err = embed(capsys, source, out, "--engine", "ray")
    assert code == 2 and "pip install 'npbert[ray]'" in err, err
    assert not out.exists()
    assert embed(capsys, source, out) == (0, "")


KILLED_AT_FIRST_COMMIT = """
import os, sys
from npbert.cli import main
from npbert.stream import corpus
commit = corpus.commit_shard
def killed(*args, write):
    if sys.argv[1] == "after":  # committed, the index not yet rewritten (once a second)
        commit(*args, write=False)
    os._exit(9)  # as kill -9 there would
corpus.commit_shard = killed
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("retry", [[], ["--resume"], ["--dtype", "float16"],
                                   ["--dtype", "float16", "--resume"]])  # fmt: skip
def test_a_run_killed_before_its_index_lists_a_shard_is_no_obstacle_to_the_next(
    tmp_path, capsys, retry, when
):
    """kill -9 leaves what the run wrote at its start (its index, lock, pending files), and
    the shards committed in its first second, which the index does not list yet: nothing of
    the input it says, so the next run, of any settings, takes the directory as empty."""
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(30, longest=20)) + "\n")
    argv = ["embed", "--input", source, "--out", out, "--model", TINY, "--quiet"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_FIRST_COMMIT, when, *map(str, argv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert killed.returncode == 9, killed.stderr
    assert {"index.json", ".npbert.lock"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "index.json").read_text())["shards"] == []
    assert (out / "shard-00000.npy").exists() == (when == "after")
    code, err = embed(capsys, source, out, *retry)
    assert code == 0, err
    assert sum(1 for _ in read_corpus(out)) == 30
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_sighup_stops_the_run_and_cleans_up_as_sigterm_does(tmp_path, minilm_dir):
    """A closed terminal (a dropped ssh session) ended the run at once with 129, leaving its
    lock and pending files."""
    process, out = _running(tmp_path, minilm_dir)
    workers = _children(process.pid)
    process.send_signal(signal.SIGHUP)
    _ended_cleanly(process, out, workers, 129, "npbert: hung up\n")


@pytest.mark.slow
def test_sighup_ignored_as_by_nohup_leaves_the_run_going(tmp_path):
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("\n".join(corpus_lines(3000, longest=20)) + "\n")
    argv = ["embed", "--input", source, "--out", out, "--model", TINY, "--shard-bytes", "2000"]
    process = subprocess.Popen(
        [sys.executable, "-m", "npbert.cli", *map(str, argv)],
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # as nohup does
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if (out / "index.json").exists():
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGHUP)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert json.loads((out / "index.json").read_text())["texts"] == 3000


def _drop_a_middle_shard(index):  # and make its counts add up again
    del index["shards"][1]


def _drop_the_last_shard(index):
    index["shards"].pop()


def _repeat_a_shard(index):
    index["shards"].insert(2, dict(index["shards"][1]))


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_drop_a_middle_shard, "lists shard-00002 in the place of shard-00001"),
        (_drop_the_last_shard, "texts of the input were consumed, and its shards hold"),
        (_repeat_a_shard, "lists shard-00001 in the place of shard-00002"),
    ],
)
def test_read_corpus_refuses_an_index_that_disagrees_with_itself(tmp_path, edit, problem):
    """A shard taken out of the list, with the counts made to add up again, was texts
    missing without a word (298 of 300)."""
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("".join(f"text number {i}\n" for i in range(40)))
    assert main(["embed", "--input", str(source), "--out", str(out), "--model", str(TINY),
                 "--shard-bytes", "100", "--quiet"]) == 0  # fmt: skip
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) >= 4
    edit(index)
    first = 0
    for shard in index["shards"]:  # the counts added up again
        shard["first"], first = first, first + shard["texts"]
    index["texts"] = first
    index["tokens"] = sum(shard["tokens"] for shard in index["shards"])
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(npbert.DamagedCorpus) as caught:
        list(read_corpus(out))
    assert problem in caught.value.problem and caught.value.path == out / "index.json"
    assert str(caught.value).startswith(f"read_corpus: {out / 'index.json'} ")


def test_resume_refuses_an_index_whose_counts_were_made_to_agree_without_a_shard(tmp_path, capsys):
    """Its last shard dropped, its totals and consumed texts made to agree: --resume embedded
    nothing more and said it was complete, with the dropped shard's texts missing (and its
    files deleted)."""
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("".join(f"text number {i}\n" for i in range(40)))
    assert embed(capsys, source, out, "--shard-bytes", "100")[0] == 0
    index = json.loads((out / "index.json").read_text())
    dropped = index["shards"].pop()
    for key in ("texts", "tokens"):
        index[key] -= dropped[key]
    index["consumed"]["texts"] -= dropped["texts"]  # its bytes and hash as they were
    (out / "index.json").write_text(json.dumps(index))
    code, err = embed(capsys, source, out, "--shard-bytes", "100", "--resume")
    assert code == 2 and err.count("\n") == 1, err
    assert f"says its shards hold {index['texts']} texts, and the input's bytes" in err
    assert (out / f"{dropped['name']}.npy").exists()  # nothing removed


def test_a_ray_address_where_no_ray_cluster_answers_is_refused_at_once(tmp_path, capsys):
    """A web server on the port: ray.init retried for minutes, logging each try."""
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source, out = tmp_path / "c.txt", tmp_path / "out"
        source.write_text("one\n")
        address = f"127.0.0.1:{server.server_address[1]}"
        started = time.monotonic()
        code, err = embed(capsys, source, out, "--engine", "ray", "--address", address)
    finally:
        server.shutdown()
    assert code == 2 and f"{address} answers, but not as a Ray cluster" in err, err
    assert time.monotonic() - started < 30 and not out.exists()
