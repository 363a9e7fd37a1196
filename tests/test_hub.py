"""Hub access against a Hub-compatible server on 127.0.0.1 (tests/fake_hub.py).

Every npbert run here is a separate process with HF_ENDPOINT pointing at the server and
HF_HOME at a fresh directory, as a user would run it. Each run is bounded in time (RUN_LIMIT),
and so is every fault the server injects (fake_hub.HOLD).
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, TINY
from fake_hub import REVOKED, TOKEN, FakeHub, Fault, serve
from safetensors.numpy import load_file, save_file

import npbert

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BASE = "test/bert-base-shaped"
SMALL_FILES = ("config.json", "vocab.txt")
RUN_LIMIT = 300  # seconds any one npbert run may take
ROOT = Path(__file__).resolve().parent.parent
FAST = {"HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}  # timeouts for fault tests


def data_range(method: str, path: str, wanted: str) -> bool:
    """A request for tensor bytes: a Range past the header's length and the header."""
    return wanted.startswith("bytes=") and not wanted.startswith(("bytes=0-7", "bytes=8-"))


def header_range(method: str, path: str, wanted: str) -> bool:
    return wanted.startswith("bytes=8-")


def model_info(method: str, path: str, wanted: str) -> bool:
    return path.startswith("/api/models/")


def config_download(method: str, path: str, wanted: str) -> bool:
    return method == "GET" and path.endswith("/config.json")


def everything(method: str, path: str, wanted: str) -> bool:
    return True


@pytest.fixture(scope="session")
def bert_base_dir(tmp_path_factory):
    """A checkpoint shaped like bert-base-uncased: random 30522x768 word table, and encoder
    tensors after the embeddings so that they are about a fifth of the 440 MB file."""
    directory = tmp_path_factory.mktemp("bert-base-shaped")
    rng = np.random.default_rng(0)
    tensors = {
        "bert.embeddings.word_embeddings.weight": rng.standard_normal((30522, 768), np.float32),
        "bert.embeddings.position_embeddings.weight": rng.standard_normal((512, 768), np.float32),
        "bert.embeddings.token_type_embeddings.weight": rng.standard_normal((2, 768), np.float32),
        "bert.embeddings.LayerNorm.gamma": rng.uniform(0.5, 1.5, 768).astype(np.float32),
        "bert.embeddings.LayerNorm.beta": rng.standard_normal(768, np.float32),
    }
    for i in range(36):
        tensors[f"bert.encoder.layer.{i // 3}.t{i % 3}.weight"] = np.zeros((768, 3072), np.float32)
    save_file(tensors, str(directory / "model.safetensors"))
    config = json.loads((TINY / "config.json").read_text())
    config.update(hidden_size=768, vocab_size=30522, max_position_embeddings=512)
    (directory / "config.json").write_text(json.dumps(config))
    shutil.copy(TINY / "vocab.txt", directory / "vocab.txt")
    return directory


@pytest.fixture(scope="session")
def repos(tmp_path_factory, minilm_dir, bert_base_dir):
    """Checkpoint directories to serve: repo id -> (directory, options)."""
    root = tmp_path_factory.mktemp("repos")
    pickled = root / "pickled"
    pickled.mkdir()
    shutil.copy(TINY / "config.json", pickled)
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04 not for unpickling")

    sharded = root / "sharded"
    sharded.mkdir()
    tensors = load_file(str(TINY / "model.safetensors"))
    shards = {
        "model-00001-of-00002.safetensors": {k: v for k, v in tensors.items() if ".encoder" in k},
        "model-00002-of-00002.safetensors": {k: v for k, v in tensors.items() if ".embed" in k},
    }
    weight_map = {}
    for name, part in shards.items():
        save_file(part, str(sharded / name))
        weight_map.update(dict.fromkeys(part, name))
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for name in ("config.json", "vocab.txt"):
        shutil.copy(TINY / name, sharded)
    lying = {  # indexes that put the embeddings in the shard without them, or in no shard
        "lies": dict.fromkeys(tensors, "model-00001-of-00002.safetensors"),
        "strangers": dict.fromkeys(tensors, "model-00009-of-00009.safetensors"),
    }
    lying["list"] = list(weight_map)  # not an object at all
    for kind, lie in lying.items():
        shutil.copytree(sharded, root / kind)
        (root / kind / "model.safetensors.index.json").write_text(json.dumps({"weight_map": lie}))
    no_config = root / "no-config"
    no_config.mkdir()
    shutil.copy(TINY / "model.safetensors", no_config)
    return {
        MINILM: (minilm_dir, {"tags": ["v1.0"]}),
        BASE: (bert_base_dir, {}),
        "test/tiny": (TINY, {}),
        "test/gated": (TINY, {"gated": True}),
        "test/pickled": (pickled, {}),
        "test/sharded": (sharded, {}),
        "test/index-lies": (root / "lies", {}),
        "test/index-strangers": (root / "strangers", {}),
        "test/index-list": (root / "list", {}),
        "test/no-config": (no_config, {}),
        **{f"test/tiny-{family}": (DATA / f"tiny-{family}", {}) for family in FAMILY_REPOS},
    }


@pytest.fixture(scope="session")
def server(repos):
    hub = FakeHub()
    for repo_id, (directory, options) in repos.items():
        hub.add(repo_id, directory, **options)
    httpd = serve(hub)
    yield hub, f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.fixture
def hub(server, tmp_path):
    """The server with fresh counts and no faults, and functions running npbert against it
    (each result has .seconds, the run's wall time)."""
    fake, endpoint = server
    fake.reset_counts()
    fake.ignore_range = False
    fake.faults.clear()
    fake.release.clear()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TQDM_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")

    def run(argv, extra_env):
        started = time.monotonic()
        result = subprocess.run(
            [str(a) for a in argv],
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            timeout=RUN_LIMIT,
            check=False,
        )
        result.seconds = time.monotonic() - started
        assert "Traceback" not in result.stderr, result.stderr
        return result

    fake.run = lambda *argv, **extra: run([sys.executable, "-m", "npbert.cli", *argv], extra)
    fake.python = lambda code, **extra: run([sys.executable, "-c", code], extra)
    fake.exec = lambda *argv, **extra: run(argv, extra)
    fake.env = env
    fake.home = tmp_path / "hf"
    yield fake
    fake.release.set()  # ends any fault still holding a connection


@pytest.fixture(scope="module")
def tiny_cache(server, tmp_path_factory) -> Path:
    """An HF_HOME holding test/tiny as `npbert fetch test/tiny` leaves it, made once per module
    for the tests that damage it (copy it to hub.home)."""
    fake, endpoint = server
    fake.faults.clear()  # any a test before left unspent
    fake.ignore_range = False
    home = tmp_path_factory.mktemp("tiny-cache") / "hf"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TQDM_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "fetch", "test/tiny"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return home


def snapshot(hub, repo_id: str) -> Path:
    """The repo's snapshot directory in the Hub cache, for the commit the server serves."""
    repo = "models--" + repo_id.replace("/", "--")
    return hub.home / "hub" / repo / "snapshots" / hub.repos[repo_id].sha


def entries(hub, repo_id: str) -> list[Path]:
    """npbert's embedding-only checkpoints of a repo, and any temporaries, in the cache."""
    return sorted(snapshot(hub, repo_id).parent.glob("*/*npbert-embeddings*"))


def one_line(result) -> str:
    """The one error line of a failed run (exit 2), checked to be all it printed."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("npbert: error: ")
    return result.stderr


def embed_to(hub, tmp_path, model, *extra, name="out.npz"):
    out = tmp_path / name
    result = hub.run(
        "embed", "I am Sinan", "this is a test sentence", "--model", model, "--out", out, *extra
    )
    assert result.returncode == 0, result.stderr
    with np.load(out, allow_pickle=False) as saved:
        return {k: saved[k] for k in saved.files}


# Families whose layer reads other tensors than BERT's: a projection, no token types, other names.
FAMILY_REPOS = ("albert", "deberta-v2", "modernbert", "roberta")


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILY_REPOS)
def test_a_fetch_takes_exactly_the_tensors_the_family_reads(hub, tmp_path, family):
    from safetensors import safe_open

    result = hub.run("fetch", f"test/tiny-{family}", "--quiet")
    assert result.returncode == 0, result.stderr
    cached = Path(result.stdout.strip().splitlines()[-1])
    local = npbert.load_weights(DATA / f"tiny-{family}")
    with safe_open(cached / "model.safetensors", framework="numpy") as f:
        names = set(f.keys())
    assert names == {tensor.name for tensor in local_tensors(DATA / f"tiny-{family}")}
    fetched = npbert.load_weights(cached)
    assert fetched.config == local.config
    for name, array in local.arrays.items():
        np.testing.assert_array_equal(fetched.arrays[name], array, err_msg=name)


@pytest.mark.slow
def test_the_same_commit_gives_the_same_file_and_vectors(hub, tmp_path):
    # The cached file is written by npbert: its bytes, and the sha256 that `npbert vectors`
    # records, must not change from one fetch to the next.
    digests, manifests = set(), []
    for home in ("a", "b", "c"):
        env = {"HF_HOME": str(tmp_path / home)}
        result = hub.run("fetch", "test/tiny", "--quiet", **env)
        assert result.returncode == 0, result.stderr
        cached = Path(result.stdout.strip().splitlines()[-1]) / "model.safetensors"
        digests.add(hashlib.sha256(cached.read_bytes()).hexdigest())
        out = tmp_path / f"vectors-{home}"
        assert hub.run("vectors", "--model", "test/tiny", "--out", out, **env).returncode == 0
        manifests.append(json.loads((out / "manifest.json").read_text())["weights_sha256"])
    assert len(digests) == 1 and manifests[0] == manifests[1] == manifests[2]


def local_tensors(directory):
    from npbert.loading.checkpoint import locate_checkpoint

    return locate_checkpoint(directory)[1].values()


def test_hub_model_equals_the_same_directory_loaded_locally(hub, tmp_path, minilm_dir):
    saved = embed_to(hub, tmp_path, MINILM)
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)
    np.testing.assert_array_equal(saved["input_ids"], local.input_ids)
    meta = json.loads(str(saved["metadata"]))
    assert meta["model"] == MINILM and meta["commit"] == hub.repos[MINILM].sha
    assert meta["weights"] == "embedding tensors only"


@pytest.mark.slow
def test_only_the_embedding_tensors_are_downloaded(hub, bert_base_dir, record):
    result = hub.run("fetch", BASE)
    assert result.returncode == 0, result.stderr
    full = (bert_base_dir / "model.safetensors").stat().st_size
    tensors = npbert.load_weights(bert_base_dir)
    embedding_bytes = tensors.nbytes
    small = sum((bert_base_dir / name).stat().st_size for name in SMALL_FILES)
    header = 8 + int.from_bytes((bert_base_dir / "model.safetensors").read_bytes()[:8], "little")
    assert hub.bytes_sent <= (embedding_bytes + header + small) * 1.05
    record(
        f"bert-base-shaped fetch: {hub.bytes_sent:,} bytes served of a {full:,}-byte "
        f"weights file ({hub.bytes_sent / full:.1%}); embedding tensors {embedding_bytes:,}"
    )
    assert f"{BASE} at {hub.repos[BASE].sha} (main)" in result.stdout
    assert "out of" in result.stdout and "cached in" in result.stdout
    again = hub.run("fetch", BASE)
    assert "(main)\nalready cached: nothing downloaded" in again.stdout
    assert entries(hub, BASE) == [snapshot(hub, BASE) / "npbert-embeddings"]
    np.testing.assert_array_equal(
        npbert.load_weights(entries(hub, BASE)[0]).word_embeddings, tensors.word_embeddings
    )


@pytest.mark.slow
def test_second_load_makes_no_request(hub, tmp_path):
    first = embed_to(hub, tmp_path, "test/tiny", name="a.npz")
    hub.reset_counts()
    second = embed_to(hub, tmp_path, "test/tiny", name="b.npz")
    assert hub.requests == []
    np.testing.assert_array_equal(first["embeddings"], second["embeddings"])


@pytest.mark.slow
def test_offline_loads_from_cache_and_fails_clearly_when_not_cached(hub, tmp_path):
    embed_to(hub, tmp_path, "test/tiny")
    hub.reset_counts()
    assert embed_to(hub, tmp_path, "test/tiny", name="o.npz")["embeddings"].shape[-1] == 32
    offline = hub.run("embed", "x", "--model", "test/tiny", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and hub.requests == []
    missing = hub.run("embed", "x", "--model", MINILM, HF_HUB_OFFLINE="1")
    assert "is not in the cache" in one_line(missing) and hub.requests == []
    assert "(HF_HUB_OFFLINE or --offline)" in missing.stderr
    tag = hub.run("embed", "x", "--model", "test/tiny", "--revision", "v9", HF_HUB_OFFLINE="1")
    assert "test/tiny at revision v9 is not in the cache" in one_line(tag)
    # cached, but not whole: what is missing is the whole file
    full = hub.run("embed", "x", "--model", "test/tiny", "--full", HF_HUB_OFFLINE="1")
    assert (
        "the whole weights file of test/tiny (only its embedding tensors are cached) is not in "
        "the cache"
    ) in one_line(full)


@pytest.mark.slow
def test_unreachable_hub_uses_the_cache_or_says_what_to_do_within_10_s(hub, tmp_path, record):
    embed_to(hub, tmp_path, "test/tiny")
    closed = "http://127.0.0.1:9"  # discard port: nothing listens on loopback there
    cached = hub.run("embed", "x", "--model", "test/tiny", HF_ENDPOINT=closed)
    assert cached.returncode == 0, cached.stderr
    uncached = hub.run("embed", "x", "--model", "test/sharded", HF_ENDPOINT=closed)
    # one line: huggingface_hub's retry warnings stay off the terminal
    line = one_line(uncached)
    assert "cannot reach http://127.0.0.1:9 (" in line and "test/sharded is not cached" in line
    assert uncached.seconds < 10
    record(f"unreachable Hub (closed port): one-line error after {uncached.seconds:.1f} s")
    # fetch asks the Hub even for a cached repo: the cached copy is named, and that it loads
    commit = snapshot(hub, "test/tiny").name
    line = one_line(hub.run("fetch", "test/tiny", HF_ENDPOINT=closed))
    assert "cannot reach http://127.0.0.1:9 (" in line and "not cached" not in line
    assert f"to check test/tiny for a newer commit; the copy cached at {commit[:12]} still " in line
    truncate(entries(hub, "test/tiny")[0] / "vocab.txt")  # damaged, and the Hub unreachable
    line = one_line(hub.run("fetch", "test/tiny", HF_ENDPOINT=closed))
    assert "cannot reach http://127.0.0.1:9 (" in line and ", and the cached test/tiny at " in line
    assert "is damaged (" in line and "not cached" not in line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "limit"), [({}, 10), ({"HF_HUB_ETAG_TIMEOUT": "2"}, 5)], ids=["default", "etag-2s"]
)
def test_hub_that_accepts_and_never_answers_fails_in_time(hub, env, limit, record):
    hub.faults.append(Fault("stall", everything, times=100))
    result = hub.run("fetch", "test/tiny", **env)
    line = one_line(result)
    assert "cannot reach" in line and "test/tiny is not cached" in line
    assert result.seconds < limit
    assert hub.requests and all(path.startswith("/api/models/") for _, path, _ in hub.requests)
    record(f"Hub that never answers ({env or 'defaults'}): error after {result.seconds:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HF_HUB_DOWNLOAD_TIMEOUT", "1.5"),  # huggingface_hub's import raises on these
        ("HF_HUB_ETAG_TIMEOUT", "abc"),
        ("HF_HUB_ETAG_TIMEOUT", ""),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "-1"),  # the HTTP client's, mid-request, on these
        ("HF_HUB_ETAG_TIMEOUT", "-1"),
        ("HF_HUB_ETAG_TIMEOUT", "0"),  # huggingface_hub's default of 10 s instead
    ],
)
@pytest.mark.parametrize("quiet", [[], ["--quiet"]], ids=["", "quiet"])
def test_a_bad_timeout_variable_is_named_in_one_line(hub, name, value, quiet):
    result = hub.run("fetch", *quiet, "test/tiny", **{name: value})
    assert f"{name}={value!r} is not a whole number of seconds" in one_line(result)
    assert hub.requests == []


def test_embed_each_of_a_local_model_imports_no_huggingface_hub(hub):
    """Importing huggingface_hub reads its timeouts with int(): "1.5" would fail the import,
    and a setting for downloads must not stop a local embedding."""
    code = (
        "import sys, npbert\n"
        f"each = npbert.Embedder.from_pretrained({str(TINY)!r}).embed_each(['a'])\n"
        "print(len(each), 'huggingface_hub' in sys.modules)"
    )
    result = hub.python(code, HF_HUB_DOWNLOAD_TIMEOUT="1.5")
    assert (result.returncode, result.stdout, result.stderr) == (0, "1 False\n", "")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stall_body", "trickle"])
def test_stalled_or_trickling_tensor_bytes_honour_the_download_timeout(hub, kind, record):
    hub.faults.append(Fault(kind, data_range))
    result = hub.run("fetch", "test/tiny", HF_HUB_DOWNLOAD_TIMEOUT="2")
    assert "nothing was cached" in one_line(result)
    assert result.seconds < 8
    assert entries(hub, "test/tiny") == []
    record(f"{kind} in the tensor bytes, HF_HUB_DOWNLOAD_TIMEOUT=2: {result.seconds:.1f} s")


@pytest.mark.slow
def test_revision_pinning_by_tag_and_sha_is_recorded(hub, tmp_path):
    sha = hub.repos[MINILM].sha
    by_tag = embed_to(hub, tmp_path, MINILM, "--revision", "v1.0", name="t.npz")
    by_sha = embed_to(hub, tmp_path, MINILM, "--revision", sha, name="s.npz")
    for saved, revision in ((by_tag, "v1.0"), (by_sha, sha)):
        meta = json.loads(str(saved["metadata"]))
        assert meta["commit"] == sha and meta["revision"] == revision
    np.testing.assert_array_equal(by_tag["embeddings"], by_sha["embeddings"])
    bad = hub.run("embed", "x", "--model", MINILM, "--revision", "no-such-branch")
    assert bad.returncode == 2 and "revision 'no-such-branch' not found" in bad.stderr


@pytest.mark.slow
def test_full_downloads_the_whole_file(hub, tmp_path, minilm_dir):
    saved = embed_to(hub, tmp_path, MINILM, "--full")
    assert hub.bytes_sent >= (minilm_dir / "model.safetensors").stat().st_size
    assert json.loads(str(saved["metadata"]))["weights"] == "full file"
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)


@pytest.mark.slow
def test_sharded_repo_fetches_only_the_shard_with_the_embeddings(hub, tmp_path):
    saved = embed_to(hub, tmp_path, "test/sharded")
    paths = [path for _, path, _ in hub.requests]
    assert any("model-00002-of-00002" in p for p in paths)
    assert not any("model-00001-of-00002" in p for p in paths)
    local = npbert.Embedder.from_pretrained(TINY)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo", "message"),
    [
        ("test/index-lies", "in model-00001-of-00002.safetensors, which lacks it"),
        ("test/index-strangers", "names shards the repo does not have"),
        ("test/index-list", "model.safetensors.index.json has no weight_map object"),
    ],
)
def test_a_repo_whose_index_is_wrong_says_so_on_every_run(hub, repo, message):
    for _ in range(2):  # the first run leaves the index in the cache: not a cached checkpoint
        for extra in ((), ("--full",)):
            result = hub.run("embed", "x", "--model", repo, *extra)
            assert message in one_line(result), result.stderr


@pytest.mark.slow
def test_an_empty_hf_endpoint_is_named_as_such(hub):
    """huggingface_hub 1.x and later take HF_ENDPOINT='' as the address (0.x goes to
    huggingface.co instead, so this runs only where the request cannot leave)."""
    code = "from huggingface_hub import constants; print(repr(constants.ENDPOINT))"
    endpoint = hub.python(code, HF_ENDPOINT="").stdout.strip()
    if endpoint != "''":
        pytest.skip(f"this huggingface_hub replaces an empty HF_ENDPOINT with {endpoint}")
    result = hub.run("embed", "x", "--model", "test/tiny", HF_ENDPOINT="")
    assert "cannot reach HF_ENDPOINT='' (no address) (" in one_line(result)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo", "env", "message"),
    [
        ("test/nope", {}, "test/nope: repository not found on http://127.0.0.1"),
        ("test/gated", {}, "test/gated is gated or private (401/403)"),
        ("test/pickled", {}, "has only pytorch_model.bin: npbert reads safetensors"),
        ("not a repo!", {}, "is not a valid Hub repo id"),
        ("test/no-config", {}, "test/no-config: config.json not found\n"),
        ("mymodel", {}, "not found on http://127.0.0.1"),
        ("mymodel", {"HF_ENDPOINT": "http://127.0.0.1:9"}, "cannot reach http://127.0.0.1:9"),
    ],
)
def test_hub_errors_are_one_line_with_exit_2(hub, repo, env, message):
    result = hub.run("embed", "x", "--model", repo, **env)
    assert message in one_line(result)
    if repo == "not a repo!":  # fetch skips the cache: the id is refused all the same
        assert message in one_line(hub.run("fetch", repo))
        assert hub.requests == []
    # a name that matched nothing may be a mistyped directory: say that there is none
    nowhere = "not found on" in message or "cannot reach" in message
    assert nowhere == (f"no local directory named {repo} exists either" in result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo", "env", "fault", "message"),
    [
        ("test/tiny", {"HF_TOKEN": REVOKED}, None, "the Hub does not know the token sent"),
        ("test/gated", {"HF_TOKEN": REVOKED}, None, "the Hub does not know the token sent"),
        ("test/gated", {"HF_TOKEN": "hf_another"}, None, "and the token sent has no access"),
        ("test/gated", {}, None, "then pass a token (`npbert fetch --token`, HF_TOKEN"),
        ("test/tiny", {}, Fault("error_429", model_info), "429 Too Many Requests for http://"),
    ],
    ids=["revoked", "gated-revoked", "gated-other-token", "gated-no-token", "rate-limited"],
)
def test_refusals_say_what_to_do_about_the_token_or_the_rate(hub, repo, env, fault, message):
    hub.faults.extend([fault] if fault else [])
    line = one_line(hub.run("fetch", repo, **env))
    assert message in line
    assert ("rate limited; wait" in line) == (fault is not None)


@pytest.mark.slow
def test_gated_repo_loads_with_a_token(hub, tmp_path):
    result = hub.run(
        "embed", "x", "--model", "test/gated", "--out", tmp_path / "g.npz", HF_TOKEN=TOKEN
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_server_ignoring_range_falls_back_to_a_full_download(hub, tmp_path, minilm_dir):
    hub.ignore_range = True
    saved = embed_to(hub, tmp_path, MINILM)
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)
    assert json.loads(str(saved["metadata"]))["weights"] == "full file"


@pytest.mark.slow
def test_server_ignoring_range_is_reported(hub):
    hub.ignore_range = True
    result = hub.run("fetch", "test/tiny")
    assert result.returncode == 0
    said = [line for line in result.stderr.splitlines() if "Range request" in line]
    assert len(said) == 1 and said[0].startswith(
        "npbert: warning: the server did not answer the Range request for test/tiny with the "
        "part asked (it answered 200, "
    )
    assert said[0].endswith("); downloading the whole weights file instead")


@pytest.mark.slow
def test_a_page_in_answer_to_a_range_request_is_reported_as_what_it_is(hub):
    """A sign-in page is named by its status and type, not as a server that ignores Range."""
    hub.faults.append(Fault("html_200", lambda m, p, r: r.startswith("bytes=0-7") and "tiny" in p))
    result = hub.run("fetch", "test/tiny")
    assert result.returncode == 0, result.stderr
    assert "Range request for test/tiny with the part asked (it answered 200, text/html)" in (
        result.stderr
    )


@pytest.mark.slow
def test_connection_dropped_mid_range_caches_nothing_and_retry_succeeds(hub, tmp_path):
    hub.faults.append(Fault("short", lambda m, p, r: data_range(m, p, r) and "bert-base" in p))
    first = hub.run("fetch", BASE)
    assert "nothing was cached" in one_line(first)
    assert entries(hub, BASE) == []
    retry = hub.run("fetch", BASE)
    assert retry.returncode == 0, retry.stderr
    assert entries(hub, BASE) == [snapshot(hub, BASE) / "npbert-embeddings"]


@pytest.mark.slow
def test_two_processes_fetching_at_once_both_succeed(hub, bert_base_dir):
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: hub.run("fetch", BASE), range(2)))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert entries(hub, BASE) == [snapshot(hub, BASE) / "npbert-embeddings"]
    np.testing.assert_array_equal(
        npbert.load_weights(entries(hub, BASE)[0]).word_embeddings,
        npbert.load_weights(bert_base_dir).word_embeddings,
    )
    assert sum("already cached" in r.stdout for r in results) <= 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "where", "message"),
    [
        ("stall_body", data_range, "nothing was cached"),
        ("trickle", data_range, "slower than 1024 bytes/s"),
        ("reset", data_range, "nothing was cached"),
        ("short", data_range, "nothing was cached"),
        ("wrong_range", data_range, "the server answered Content-Range"),
        ("no_content_range", data_range, "the server answered Content-Range ''"),
        ("wrong_length", data_range, "Content-Length"),
        ("wrong_size", data_range, "then the server said"),
        ("wrong_range", header_range, "the server answered Content-Range"),
        ("short", header_range, "nothing was cached"),
        ("wrong_size", header_range, "then the server said"),
        ("stall", model_info, "no answer in 2 s"),
        ("error_503", model_info, "the Hub answered 503 Service Unavailable for http"),
        ("html_200", model_info, "with what is not a Hub's model info (JSONDecodeError"),
        ("list_200", model_info, "with what is not a Hub's model info"),
        ("html_200", config_download, "config.json came 20 bytes long, not"),
        ("list_200", config_download, "config.json came 2 bytes long, not"),
        ("changed_etag", data_range, 'another version of the file between two requests (ETag "'),
        ("changed_etag", header_range, '(ETag "'),
    ],
)
def test_each_fault_is_a_one_line_error_in_time_and_a_rerun_is_correct(hub, kind, where, message):
    hub.faults.append(Fault(kind, where))
    result = hub.run("fetch", "test/tiny", **FAST)
    assert message in one_line(result)
    assert result.seconds < 10
    assert entries(hub, "test/tiny") == []
    rerun = hub.run("fetch", "test/tiny", **FAST)
    assert rerun.returncode == 0, rerun.stderr
    np.testing.assert_array_equal(
        npbert.load_weights(entries(hub, "test/tiny")[0]).word_embeddings,
        npbert.load_weights(TINY).word_embeddings,
    )


WORD = "bert.embeddings.word_embeddings.weight"  # in TINY: F32 (87, 32) at [17920, 29056)


def with_word(**entry):
    return lambda header: header[WORD].update(entry)


TAMPERED = {  # how the header is changed, what the error says
    "reversed-offsets": (with_word(data_offsets=[29056, 17920]), "reversed data_offsets"),
    "shape-not-bytes": (with_word(shape=[87, 33]), "but its data_offsets hold 11136"),
    "f16-label-on-f32": (with_word(dtype="F16"), "but its data_offsets hold 11136"),
    "i32": (with_word(dtype="I32"), "is I32; npbert reads"),
    "f64": (with_word(dtype="F64", shape=[87, 16]), "is F64; npbert reads"),
    "unknown-dtype": (with_word(dtype="F12"), "unknown dtype 'F12'"),
    "dtype-a-list": (with_word(dtype=["F32"]), "unknown dtype ['F32']"),  # not a TypeError
    "overlapping": (with_word(data_offsets=[17664, 28800]), "overlaps the tensor before it"),
}


def tampered_checkpoint(directory: Path, change) -> Path:
    """TINY with change(header) applied to its safetensors header; the data buffer as is."""
    raw = (TINY / "model.safetensors").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    directory.mkdir()
    weights = len(text).to_bytes(8, "little") + text + raw[8 + length :]
    (directory / "model.safetensors").write_bytes(weights)
    for name in SMALL_FILES:
        shutil.copy(TINY / name, directory)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vocab_size": 88}, "vocab_size is 88, but the tensors have 87"),
        ({"layer_norm_eps": "1e-12"}, "layer_norm_eps is '1e-12'; it must be a number"),
        ({"hidden_size": 64}, "hidden_size is 64, but the tensors have 32"),
    ],
)
def test_fetch_refuses_a_config_that_loading_would_refuse(hub, tmp_path, change, message, full):
    """What fetch reports fetched, load_weights loads: config.json against the tensors,
    before any tensor's bytes are asked for (a header that disagrees cost a whole download,
    or more memory than there is)."""
    directory = tmp_path / "m"
    shutil.copytree(TINY, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | change))
    hub.add("test/bad-config", directory)
    result = hub.run("fetch", "test/bad-config", *(["--full"] if full else []))
    assert message in one_line(result)
    assert full or not any(data_range(*request) for request in hub.requests)
    with pytest.raises(npbert.InputError, match=message):
        npbert.load_weights(directory)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"tokenizer.json": "{"}, "tokenizer.json is not a tokenizer the tokenizers library reads"),
        ({"vocab.txt": "[CLS]\n[SEP]\n"}, "vocab.txt lacks [UNK]: it is not a BERT vocabulary"),
        ({"vocab.txt": "".join(f"w{i}\n" for i in range(100)) + "[CLS]\n[SEP]\n[UNK]\n"},
         "has 103 words, more than the model's word table (87 rows)"),
    ],
)  # fmt: skip
def test_fetch_refuses_tokenizer_files_embedding_texts_would_refuse(hub, tmp_path, files, message):
    """fetch reported success, and every command given a text then refused the checkpoint."""
    directory = tmp_path / "m"
    shutil.copytree(TINY, directory)
    for name, text in files.items():
        (directory / name).write_text(text)
    hub.add("test/bad-tokenizer", directory)
    assert message in one_line(hub.run("fetch", "test/bad-tokenizer"))
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        npbert.Embedder.from_pretrained(directory)


@pytest.mark.slow
def test_fetch_takes_a_checkpoint_without_tokenizer_files(hub, tmp_path):
    """Ids need none: the tokenizer check is for the files a checkpoint has."""
    directory = tmp_path / "m"
    shutil.copytree(TINY, directory)
    (directory / "vocab.txt").unlink()
    hub.add("test/ids-only", directory)
    result = hub.run("fetch", "test/ids-only", "--quiet")
    assert result.returncode == 0, result.stderr
    npbert.load_weights(result.stdout.strip())


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_served_header_is_checked_as_a_local_file_is(hub, tmp_path, case):
    change, message = TAMPERED[case]
    directory = tampered_checkpoint(tmp_path / case, change)
    hub.add(f"test/{case}", directory)
    assert message in one_line(hub.run("fetch", f"test/{case}"))
    assert entries(hub, f"test/{case}") == []
    # whole, it is checked before it is kept: a load would call the cache damaged
    line = one_line(hub.run("fetch", f"test/{case}", "--full"))
    if case not in ("i32", "f64"):  # a damaged file; those are of a kind npbert refuses
        assert message in line
        assert f"test/{case}/model.safetensors at " in line and "; not kept in the" in line
        assert not (snapshot(hub, f"test/{case}") / "model.safetensors").exists()
    assert "is damaged" not in one_line(hub.run("inspect", f"test/{case}", "--full"))
    with pytest.raises(npbert.InputError):  # the local loader refuses the same file
        npbert.load_weights(directory)


@pytest.mark.slow
def test_a_weights_file_too_short_for_its_header_length_is_refused_not_retried(hub, tmp_path):
    """The server cuts the range for bytes 0-7 at the file's end (a 3-byte file), as HTTP has
    it: that is the file, not a network fault to try again."""
    directory = tmp_path / "short"
    shutil.copytree(TINY, directory)
    (directory / "model.safetensors").write_bytes(b"abc")
    hub.add("test/short", directory)
    error = one_line(hub.run("fetch", "test/short"))
    assert "the file is 3 bytes long, and bytes 0-7 were asked for" in error
    assert "try again" not in error and entries(hub, "test/short") == []


def mount_namespace() -> list[str]:
    """The command that runs the rest in user and mount namespaces of its own (root can
    mount there), or the test is skipped where the machine has none."""
    namespace = ["unshare", "--user", "--map-root-user", "--mount"]
    try:
        probe = subprocess.run([*namespace, "true"], capture_output=True, timeout=30, check=False)
    except FileNotFoundError:
        pytest.skip("needs unshare (util-linux)")
    if probe.returncode != 0:
        pytest.skip(f"needs user and mount namespaces: {probe.stderr.decode().strip()}")
    return namespace


@pytest.mark.slow
def test_a_full_disk_is_a_one_line_error_and_leaves_nothing(hub, tmp_path):
    """HF_HOME on a 2 MiB tmpfs, mounted in a mount namespace of the run's own."""
    namespace = mount_namespace()
    script = (
        'mount -t tmpfs -o size=2m tmpfs "$HF_HOME" || exit 9; "$0" -m npbert.cli fetch "$1"; '
        'status=$?; ls -a "$HF_HOME"/hub/models--*/snapshots/*/; exit $status'
    )
    home = tmp_path / "small-disk"
    home.mkdir()
    result = hub.exec(*namespace, "sh", "-c", script, sys.executable, BASE, HF_HOME=str(home))
    line = one_line(result)
    assert "No space left on device" in line and "choose another Hugging Face cache" in line
    assert "config.json" in result.stdout and "npbert-embeddings" not in result.stdout


READ_ONLY = 'mount --bind "$HF_HOME" "$HF_HOME" && mount -o remount,bind,ro "$HF_HOME" || exit 9'


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["fetch", "test/tiny"], ["embed", "x", "--model", "test/tiny"]])
def test_a_read_only_cache_serves_what_it_holds_and_says_it_is_read_only(hub, argv):
    """A cache baked into an image, mounted read-only: the entry it holds is used without a
    write, not even the repo's lock; what it lacks is refused as not writable (making room
    would not help)."""
    namespace = [*mount_namespace(), "sh", "-c", f'{READ_ONLY}; exec "$0" -m npbert.cli "$@"']
    hub.home.mkdir()
    cold = one_line(hub.exec(*namespace, sys.executable, *argv))
    assert "(Read-only file system): this process may not write there" in cold
    assert hub.run("fetch", "test/tiny", "--quiet").returncode == 0
    warm = hub.exec(*namespace, sys.executable, *argv)
    assert warm.returncode == 0 and warm.stderr == "", warm.stderr
    truncate(snapshot(hub, "test/tiny") / "npbert-embeddings" / "model.safetensors")
    damaged = one_line(hub.exec(*namespace, sys.executable, *argv))
    said = "is damaged (" if argv[0] == "embed" else "(Read-only file system): this process may"
    assert said in damaged


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def another_repos(entry: Path) -> None:
    """The entry's weights recorded as another repo's: its entry copied in by hand."""
    from safetensors import safe_open

    path = entry / "model.safetensors"
    with safe_open(path, framework="numpy") as f:
        record = json.loads(f.metadata()["npbert"]) | {"repo": "test/other"}
    save_file(load_file(path), path, metadata={"npbert": json.dumps(record)})


DAMAGE = {  # someone else's doing, and what the error says of it
    "truncated weights": (lambda entry: truncate(entry / "model.safetensors"), "cover"),
    "no weights": (lambda entry: (entry / "model.safetensors").unlink(), "model.safetensors"),
    "no config": (lambda entry: (entry / "config.json").unlink(), "lacks config.json"),
    "no vocab": (lambda entry: (entry / "vocab.txt").unlink(), "lacks vocab.txt"),
    "a file in its place": (lambda entry: shutil.rmtree(entry) or entry.write_text(""), "is not a"),
    "another repo's": (another_repos, "npbert-embeddings holds test/other at "),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_cache_entry_is_refused_on_load_and_built_again_by_fetch(hub, tiny_cache, case):
    shutil.copytree(tiny_cache, hub.home, symlinks=True)  # as `npbert fetch test/tiny` leaves it
    spoil, problem = DAMAGE[case]
    spoil(entries(hub, "test/tiny")[0])
    for argv in (["embed", "x", "--model", "test/tiny"], ["inspect", "test/tiny"]):
        line = one_line(hub.run(*argv))
        assert "is damaged" in line and "fetch test/tiny again to replace it" in line
        assert problem in line
    # the revision asked for: fetching main would leave another one damaged
    line = one_line(hub.run("embed", "x", "--model", "test/tiny", "--revision", "main"))
    assert "fetch test/tiny at revision main again to replace it" in line
    repaired = hub.run("fetch", "test/tiny")
    assert repaired.returncode == 0, repaired.stderr
    assert "repaired: the cached copy was damaged" in repaired.stdout
    np.testing.assert_array_equal(
        npbert.load_weights(entries(hub, "test/tiny")[0]).word_embeddings,
        npbert.load_weights(TINY).word_embeddings,
    )
    assert embed_to(hub, hub.home, "test/tiny")["embeddings"].shape[-1] == 32


def cut_in_the_entry(hub, name: str) -> None:
    truncate(entries(hub, "test/tiny")[0] / name)


def cut_in_the_snapshot(hub, name: str) -> None:
    truncate((snapshot(hub, "test/tiny") / name).resolve())  # the blob


def cut_a_copied_snapshot(hub, name: str) -> None:
    """A cache copied with its symlinks followed holds files, not links to blobs."""
    path = snapshot(hub, "test/tiny") / name
    whole = path.read_bytes()
    path.unlink()
    path.write_bytes(whole[: len(whole) // 2])


@pytest.mark.slow
@pytest.mark.parametrize("cut", [cut_in_the_entry, cut_in_the_snapshot, cut_a_copied_snapshot])
@pytest.mark.parametrize("name", ["vocab.txt", "config.json"])
def test_copies_that_disagree_with_the_snapshot_are_refused_until_the_revision_is_deleted(
    hub, cut, name
):
    """Which of the two is whole, npbert cannot tell: building the entry again from the
    snapshot would copy a file cut short into it, and loads would go on with it."""
    from huggingface_hub import scan_cache_dir

    assert hub.run("fetch", "test/tiny").returncode == 0
    cut(hub, name)
    sha = hub.repos["test/tiny"].sha
    assert f"and the snapshot's {name} differ in size (" in one_line(
        hub.run("embed", "x", "--model", "test/tiny")
    )
    line = one_line(hub.run("fetch", "test/tiny"))
    assert f"delete the revision with `hf cache rm {sha}`, then fetch it again" in line
    scan_cache_dir(hub.home / "hub").delete_revisions(sha).execute()
    assert hub.run("fetch", "test/tiny").returncode == 0
    for copy in (snapshot(hub, "test/tiny"), entries(hub, "test/tiny")[0]):
        assert (copy / name).read_bytes() == (TINY / name).read_bytes()


@pytest.mark.slow
def test_a_damaged_whole_download_is_refused_with_what_to_do(hub):
    """huggingface_hub returns a commit's cached file as it finds it: a fetch does not
    download it again, and says so, as a load does."""
    from huggingface_hub import scan_cache_dir

    assert hub.run("fetch", "test/tiny", "--full").returncode == 0
    blob = (snapshot(hub, "test/tiny") / "model.safetensors").resolve()
    os.truncate(blob, 100)
    sha = hub.repos["test/tiny"].sha
    for argv in (
        ["embed", "x", "--model", "test/tiny", "--full"],
        ["fetch", "test/tiny", "--full"],
    ):
        line = one_line(hub.run(*argv))
        assert "is damaged (" in line and f"`hf cache rm {sha}`, then fetch it again" in line
    scan_cache_dir(hub.home / "hub").delete_revisions(sha).execute()
    assert hub.run("fetch", "test/tiny", "--full").returncode == 0
    whole = (snapshot(hub, "test/tiny") / "model.safetensors").read_bytes()
    assert whole == (TINY / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_kill_9_mid_fetch_leaves_temporaries_that_the_next_fetch_removes(hub):
    hub.faults.append(Fault("stall_body", data_range))
    command = [sys.executable, "-m", "npbert.cli", "fetch", "test/tiny"]
    process = subprocess.Popen(command, env=hub.env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any(data_range(*request) for request in hub.requests):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)  # the stalled body has begun
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    left = entries(hub, "test/tiny")
    assert left and all(path.name.startswith(".npbert-embeddings.") for path in left)
    hub.release.set()
    assert hub.run("fetch", "test/tiny").returncode == 0
    assert entries(hub, "test/tiny") == [snapshot(hub, "test/tiny") / "npbert-embeddings"]


def hf_command() -> Path | None:
    """huggingface_hub's `hf` command beside this Python, where it is installed and runs."""
    hf = Path(sys.executable).with_name("hf")
    if not hf.exists():
        return None
    works = subprocess.run([hf, "--help"], capture_output=True, timeout=60, check=False)
    return hf if works.returncode == 0 else None


@pytest.mark.slow
def test_the_cache_is_one_that_huggingface_hubs_tools_list_and_delete(hub):
    from huggingface_hub import scan_cache_dir

    for repo_id in ("test/tiny", "test/sharded"):
        assert hub.run("fetch", repo_id).returncode == 0
    info = scan_cache_dir(hub.home / "hub")
    assert not info.warnings, info.warnings
    revisions = {r.repo_id: next(iter(r.revisions)) for r in info.repos}
    for repo_id, revision in revisions.items():
        assert revision.commit_hash == hub.repos[repo_id].sha
        files = {f.file_path.relative_to(revision.snapshot_path).as_posix() for f in revision.files}
        assert "npbert-embeddings/model.safetensors" in files
        ours = entries(hub, repo_id)[0] / "model.safetensors"
        assert revision.size_on_disk > ours.stat().st_size  # counted, with the Hub's files
    info.delete_revisions(revisions["test/tiny"].commit_hash).execute()
    assert not revisions["test/tiny"].snapshot_path.exists()
    assert "is not in the cache" in one_line(hub.run("fetch", "test/tiny", "--offline"))
    hf = hf_command()
    if hf is not None:
        listed = hub.exec(hf, "cache", "ls", "--show-warnings")
        assert "test/sharded" in listed.stdout
        assert "inconsisten" not in listed.stdout + listed.stderr
        removed = hub.exec(hf, "cache", "rm", revisions["test/sharded"].commit_hash, "--yes")
        assert removed.returncode == 0, removed.stderr
        assert not revisions["test/sharded"].snapshot_path.exists()


@pytest.mark.slow
def test_token_cache_dir_and_local_files_only_have_huggingface_hubs_meanings(hub, tmp_path):
    cache = tmp_path / "elsewhere"
    code = f"""
import npbert
try:
    npbert.load_weights("test/gated", cache_dir={str(cache)!r}, local_files_only=True)
except npbert.InputError as error:
    print("offline:", error)
weights = npbert.load_weights("test/gated", token={TOKEN!r}, cache_dir={str(cache)!r})
print("loaded", weights.config.hidden_size, weights.source["weights"])
"""
    result = hub.python(code)
    assert result.returncode == 0, result.stderr
    assert "offline: test/gated is not in the cache" in result.stdout
    assert "loaded 32 embedding tensors only" in result.stdout
    assert (cache / "models--test--gated").is_dir() and not hub.home.exists()
    hub.reset_counts()
    again = "import npbert; npbert.Embedder.from_pretrained('test/gated', cache_dir={!r}, {})"
    assert hub.python(again.format(str(cache), "local_files_only=True")).returncode == 0
    assert hub.requests == []
    quiet = hub.run("fetch", "test/gated", "--token", TOKEN, "--cache-dir", cache, "--quiet")
    sha = hub.repos["test/gated"].sha
    assert quiet.stdout == f"{cache}/models--test--gated/snapshots/{sha}/npbert-embeddings\n"
    hub.reset_counts()
    offline = hub.run("fetch", "test/gated", "--cache-dir", cache, "--offline")
    assert "already cached" in offline.stdout and hub.requests == []


def run_on_a_terminal(hub, *argv, **extra_env) -> tuple[int, str]:
    """npbert with stdout and stderr on a pseudo-terminal: (exit status, what it showed)."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    control, terminal = pty.openpty()
    # 24 rows of 120 columns: a new pseudo-terminal is 0 wide, and tqdm draws nothing in that
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    command = [sys.executable, "-m", "npbert.cli", *map(str, argv)]
    env = {**hub.env, **extra_env}
    process = subprocess.Popen(command, env=env, stdout=terminal, stderr=terminal)
    os.close(terminal)
    shown, deadline = b"", time.monotonic() + RUN_LIMIT
    try:
        while time.monotonic() < deadline:
            if select.select([control], [], [], 1)[0]:
                try:
                    chunk = os.read(control, 1 << 16)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
    finally:
        os.close(control)
        process.kill()
        process.wait(timeout=30)
    return process.returncode, shown.decode(errors="replace")


@pytest.mark.slow
def test_the_weights_download_shows_a_progress_bar_on_a_terminal_only(hub, tmp_path):
    status, shown = run_on_a_terminal(hub, "fetch", BASE)
    assert status == 0, shown
    assert re.search(r"model\.safetensors: +100%\|.+\| 95\.\dM/95\.\dM", shown), shown
    status, shown = run_on_a_terminal(hub, "fetch", BASE, "--quiet", HF_HOME=str(tmp_path / "b"))
    assert status == 0 and "%|" not in shown
    assert shown.strip().endswith("npbert-embeddings")
    piped = hub.run("fetch", "test/tiny")  # not a terminal: nothing on stderr
    assert piped.returncode == 0 and piped.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "waits"), [("error_503", 1 + 2 + 4), ("error_429", 3 * 1)])
def test_a_busy_server_is_asked_for_a_range_again(hub, kind, waits):
    """A 429 or 5xx for tensor bytes is retried after 1, 2 and 4 s, or the Retry-After the
    server sends (the fake's 429: 1 s), as huggingface_hub retries the small files; a fourth
    is the error."""
    hub.faults.append(Fault(kind, data_range, times=3))
    passed = hub.run("fetch", "test/tiny")
    assert passed.returncode == 0, passed.stderr
    np.testing.assert_array_equal(
        npbert.load_weights(entries(hub, "test/tiny")[0]).word_embeddings,
        npbert.load_weights(TINY).word_embeddings,
    )
    assert sum(data_range(*request) for request in hub.requests) == 4
    assert waits <= passed.seconds < waits + 8
    hub.faults.append(Fault(kind, data_range, times=4))
    failed = hub.run("fetch", "test/tiny", HF_HOME=str(hub.home / "again"))
    assert f"the Hub answered {kind[-3:]} " in one_line(failed)


@pytest.mark.slow
def test_huggingface_hubs_retry_warnings_show_only_when_asked_for(hub, tmp_path):
    def head_config(method, path, wanted):
        return method == "HEAD" and path.endswith("/config.json")

    hub.faults.append(Fault("error_503", head_config, times=2))
    quiet = hub.run("fetch", "test/tiny")
    assert "Retrying" not in quiet.stderr
    if quiet.returncode != 0:  # this huggingface_hub does not retry (0.x, 1.0): nothing to show
        assert "the Hub answered 503 Service Unavailable for http" in one_line(quiet)
        return
    hub.faults.append(Fault("error_503", head_config, times=2))
    shown = hub.run("fetch", "test/tiny", HF_HUB_VERBOSITY="warning", HF_HOME=str(tmp_path / "b"))
    assert shown.returncode == 0 and "Retrying in 1s" in shown.stderr


def test_ci_tests_the_oldest_huggingface_hub_that_pyproject_allows():
    floor = re.search(r'"huggingface_hub>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())[1]
    assert f"huggingface_hub=={floor}" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize(
    ("options", "message"),
    [  # cache_dir=5 raised os.fspath's TypeError; token=5 passed for a directory
        ({"cache_dir": 5}, "cache_dir must be a path (a str or os.PathLike), got 5"),
        ({"token": 5}, "token must be a string, True for the saved one or False for none, not int"),
        ({"cache_dir": ""}, "the cache directory is empty"),
        ({"cache_dir": str(ROOT / "pyproject.toml")}, "pyproject.toml is not a directory"),
    ],
)
@pytest.mark.parametrize("model", [str(TINY), "user/model"])
def test_hub_options_are_checked_for_a_directory_and_a_repo_id(model, options, message):
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        npbert.load_weights(model, local_files_only=True, **options)


def config_head(method: str, path: str, wanted: str) -> bool:
    return method == "HEAD" and path.endswith("/config.json")


@pytest.mark.slow
def test_a_file_request_that_gets_no_answer_is_named_and_its_wait_shown(hub, record):
    """model_info answers, config.json's HEAD does not: huggingface_hub 0.x fails at once,
    recent versions retry it (here, after the stall ends in a dropped connection, for about
    25 s of back-off). Either way the error names the file and does not say the Hub cannot
    be reached; a wait longer than the first request's timeout is shown as it happens."""
    hub.faults.append(Fault("stall", config_head, times=100))
    release = threading.Timer(3, hub.release.set)  # a stall past the 2 s timeout, then drops
    release.start()
    try:
        result = hub.run("fetch", "test/tiny", **FAST)
    finally:
        release.cancel()
    assert result.returncode == 2, (result.stdout, result.stderr)
    *notices, error = result.stderr.splitlines()
    assert error.startswith("npbert: error: test/tiny: ") and "cannot reach" not in error
    assert " for config.json from http://127.0.0.1:" in error and "nothing was cached" in error
    still = "npbert: warning: still waiting for config.json from http://127.0.0.1:"
    assert [n.startswith(still) for n in notices] == ([True] if result.seconds > 10 else [])
    assert entries(hub, "test/tiny") == []
    assert result.seconds < 60
    record(f"config.json's HEAD unanswered: named after {result.seconds:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize("where", [model_info, config_head, header_range, data_range])
def test_redirects_in_a_loop_are_a_one_line_error(hub, where):
    """The HTTP client gives up after 20 redirects, with an error of its own, from the first
    request or any later one. (huggingface_hub 0.x asks for config.json's metadata in a way
    that ends the loop: there the fetch succeeds.)"""
    hub.faults.append(Fault("redirect_loop", where, times=50))
    result = hub.run("fetch", "test/tiny", **FAST)
    if result.returncode == 0 and where is config_head:
        assert result.stderr == "" and len(entries(hub, "test/tiny")) == 1
        return
    assert "redirect" in one_line(result).lower()
    assert entries(hub, "test/tiny") == []


@pytest.mark.slow
def test_an_endpoint_that_is_no_address_is_named_in_one_line(hub):
    """huggingface_hub splits HF_ENDPOINT when imported: "http://[::1" fails the import. Only
    that is refused before any request: a cached model loads whatever HF_ENDPOINT says."""
    result = hub.run("fetch", "test/tiny", HF_ENDPOINT="http://[::1")
    assert "HF_ENDPOINT='http://[::1' is not an address (Invalid IPv6 URL)" in one_line(result)
    for port in ("notaport", "99999"):  # the import reads the port too
        result = hub.run("fetch", "test/tiny", HF_ENDPOINT=f"http://127.0.0.1:{port}")
        assert f"HF_ENDPOINT='http://127.0.0.1:{port}' is not an address (Port" in one_line(result)
    assert hub.run("fetch", "test/tiny").returncode == 0
    for endpoint in ("", "hf-mirror.com"):
        cached = hub.run("embed", "x", "--model", "test/tiny", HF_ENDPOINT=endpoint)
        assert cached.returncode == 0, cached.stderr


@pytest.mark.parametrize("revision", [5, b"main"])
def test_a_revision_that_is_not_a_string_is_named(revision):
    """Named as the caller's mistake, not the Hub's answer's nor a TypeError."""
    message = f"revision must be a string (a branch, tag or commit), not {type(revision).__name__}"
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        npbert.load_weights("user/model", revision=revision, local_files_only=True)


@pytest.mark.slow
def test_a_wait_for_another_process_holding_the_repo_lock_is_said(hub):
    """A fetch of the same repo stopped with Ctrl-Z holds the lock for as long as it likes:
    the wait must not be silent."""
    lock = hub.home / "hub" / ".locks" / "models--test--tiny" / "npbert.lock"
    lock.parent.mkdir(parents=True)
    held = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # as filelock takes it
    release = threading.Timer(6, os.close, args=(held,))
    release.start()
    try:
        result = hub.run("embed", "x", "--model", "test/tiny")
    finally:
        release.cancel()
    assert result.returncode == 0 and result.seconds >= 6, result.stderr
    assert result.stderr == (
        f"npbert: warning: waiting for another process fetching test/tiny, which holds the lock "
        f"{lock} (Ctrl-C stops)\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("record", ['{"full_bytes": 1e400}', '{"full_bytes": -5}', "[]"])
def test_a_full_file_with_an_npbert_record_it_did_not_write_loads(hub, tmp_path, record):
    """The record of the size an embedding-only file was cut from may be in any file: 1e400
    and -5 are not sizes to report."""
    directory = tmp_path / "m"
    shutil.copytree(TINY, directory)
    save_file(load_file(TINY / "model.safetensors"), directory / "model.safetensors",
              metadata={"npbert": record})  # fmt: skip
    hub.add("test/record", directory)
    assert hub.run("fetch", "test/record", "--full").returncode == 0
    assert hub.run("fetch", "test/record", "--full", "--offline").returncode == 0  # cached
    code = "from npbert.loading.hub import fetch; print(fetch('test/record', full=True).full_bytes)"
    cached = hub.python(code, HF_HUB_OFFLINE="1")
    assert cached.stdout == f"{(directory / 'model.safetensors').stat().st_size}\n", cached.stderr


@pytest.mark.slow
def test_token_true_without_a_saved_token_is_an_input_error(hub):
    """Not huggingface_hub's LocalTokenNotFoundError, an OSError: the caller's mistake."""
    code = """
import npbert
try:
    npbert.load_weights("test/tiny", token=True)
except npbert.InputError as error:
    print(error)
"""
    result = hub.python(code)
    assert result.returncode == 0, result.stderr
    assert "token=True asks for the saved token, and none is saved" in result.stdout


@pytest.mark.slow
def test_a_cache_dir_given_with_a_tilde_is_found_again(hub, tmp_path):
    """huggingface_hub expands ~ where it writes and not where npbert looks a model up: the
    model fetched must be found offline, and with no request online."""
    home = tmp_path / "home"
    home.mkdir()
    assert hub.run("fetch", "test/tiny", "--cache-dir", "~/c", HOME=str(home)).returncode == 0
    assert (home / "c" / "models--test--tiny").is_dir()
    hub.reset_counts()
    code = "import npbert; npbert.load_weights('test/tiny', cache_dir='~/c')"
    assert hub.python(code, HOME=str(home)).returncode == 0 and hub.requests == []
    offline = hub.run("fetch", "test/tiny", "--cache-dir", "~/c", "--offline", HOME=str(home))
    assert "already cached" in offline.stdout, offline.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "message"),
    [  # the Hub answered: not "cannot reach", and no traceback
        ("path_commit", "the answer for config.json names a commit that is not a commit's name"),
        ("no_etag", "answered without the headers a Hub sends ("),
        ("no_commit", "answered without the headers a Hub sends ("),
    ],
)
def test_an_answer_for_a_file_that_is_not_a_hubs_is_named(hub, kind, message):
    hub.faults.append(Fault(kind, config_head, times=10))
    assert message in one_line(hub.run("fetch", "test/tiny"))
    assert not (hub.home / "hub" / "outside").exists()


@pytest.mark.slow
def test_a_missing_default_branch_is_named_main(hub):
    hub.faults.append(Fault("no_revision", model_info))
    assert "test/tiny: revision 'main' not found" in one_line(hub.run("fetch", "test/tiny"))


@pytest.mark.slow
def test_a_damaged_shard_without_embeddings_does_not_block_loads(hub):
    """A shard npbert neither reads nor fetches (transformers, sharing the cache, may have
    left it damaged) made every load 'damaged: run npbert fetch --full', and that fetch
    repaired only the shards it reads: the same error forever."""
    assert hub.run("fetch", "test/sharded", "--full").returncode == 0
    other = snapshot(hub, "test/sharded") / "model-00001-of-00002.safetensors"
    other.write_bytes(b"\0" * 100)
    for argv in (["--full"], []):
        result = hub.run("embed", "x", "--model", "test/sharded", *argv)
        assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_403_says_to_pass_a_token_where_none_was_sent(hub):
    """Whether a token was sent decides the advice."""
    hub.faults.append(Fault("error_403", data_range))
    line = one_line(hub.run("fetch", "test/tiny"))
    assert "403" in line and "pass a token (" in line and "token sent" not in line
    hub.faults.append(Fault("error_403", data_range))
    line = one_line(hub.run("fetch", "test/tiny", HF_TOKEN=TOKEN))
    assert "the token sent has no access to it" in line


@pytest.mark.slow
def test_an_entry_recorded_by_an_older_npbert_still_loads(hub):
    """Its record names no repo and commit to compare: nothing says it is another's."""
    assert hub.run("fetch", "test/tiny").returncode == 0
    path = entries(hub, "test/tiny")[0] / "model.safetensors"
    save_file(load_file(path), path, metadata={"npbert": json.dumps({"full_bytes": 47936})})
    result = hub.run("embed", "x", "--model", "test/tiny")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_weak_etag_is_the_same_file(hub):
    """One server marks an ETag weak on one answer and not on the next: the same version."""
    hub.faults.append(Fault("weak_etag", data_range))
    result = hub.run("fetch", "test/tiny")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_full_offline_with_a_damaged_cut_cached_says_the_whole_file_is_missing(hub):
    assert hub.run("fetch", "test/tiny").returncode == 0
    truncate(entries(hub, "test/tiny")[0] / "model.safetensors")
    full = hub.run("embed", "x", "--model", "test/tiny", "--full", HF_HUB_OFFLINE="1")
    assert "the whole weights file of test/tiny (only its embedding" in one_line(full)


@pytest.mark.slow
@pytest.mark.parametrize("repo", ["test/tiny", "test/sharded"])
def test_fetch_after_a_whole_download_downloads_no_tensor_again(hub, repo):
    """The whole file cached by `fetch --full` holds the embedding tensors: fetching them
    again would download and cache them twice."""
    assert hub.run("fetch", repo, "--full").returncode == 0
    hub.reset_counts()
    result = hub.run("fetch", repo)
    assert result.returncode == 0, result.stderr
    assert "already cached: nothing downloaded (full file)" in result.stdout
    assert not [r for r in hub.requests if r[2]], hub.requests  # no Range asked
    assert entries(hub, repo) == []
    assert hub.run("embed", "x", "--model", repo, HF_HUB_OFFLINE="1").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("full", [[], ["--full"]])
def test_fetch_of_a_sharded_repo_says_which_shards_its_share_counts(hub, full):
    """The share downloaded counts only the shards holding the embeddings: it says so."""
    result = hub.run("fetch", "test/sharded", *full)
    assert result.returncode == 0, result.stderr
    assert re.search(r"out of [\d,]+ in the 1 of 2 shards holding the embeddings \(", result.stdout)
    single = hub.run("fetch", "test/tiny", *full)
    assert "out of" in single.stdout and "shards" not in single.stdout


@pytest.mark.slow
def test_fetch_after_a_whole_download_that_was_damaged_cuts_an_entry_of_its_own(hub):
    assert hub.run("fetch", "test/tiny", "--full").returncode == 0
    whole = snapshot(hub, "test/tiny") / "model.safetensors"
    whole.write_bytes(whole.read_bytes()[:-100])  # cut short
    result = hub.run("fetch", "test/tiny")
    assert result.returncode == 0, result.stderr
    assert "embedding tensors only" in result.stdout and len(entries(hub, "test/tiny")) == 1
