"""Hub access against a Hub-compatible server on 127.0.0.1 (tests/fake_hub.py).

Every npbert run here is a separate process with HF_ENDPOINT pointing at the server and
HF_HOME at a fresh directory, as a user would run it.
"""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from fake_hub import TOKEN, FakeHub, serve
from safetensors.numpy import load_file, save_file

import npbert

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BASE = "test/bert-base-shaped"
SMALL_FILES = ("config.json", "vocab.txt")


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
        "test/no-config": (no_config, {}),
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
    """The server with fresh counts, and a function running npbert against it."""
    fake, endpoint = server
    fake.reset_counts()
    fake.ignore_range = False
    fake.drop_after = None
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1")

    def npbert_cli(*argv, **extra_env):
        result = subprocess.run(
            [sys.executable, "-m", "npbert.cli", *map(str, argv)],
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert "Traceback" not in result.stderr, result.stderr
        return result

    fake.run = npbert_cli
    fake.home = tmp_path / "hf"
    return fake


def embed_to(hub, tmp_path, model, *extra, name="out.npz"):
    out = tmp_path / name
    result = hub.run(
        "embed", "I am Sinan", "this is a test sentence", "--model", model, "--out", out, *extra
    )
    assert result.returncode == 0, result.stderr
    with np.load(out, allow_pickle=False) as saved:
        return {k: saved[k] for k in saved.files}


def test_hub_model_equals_the_same_directory_loaded_locally(hub, tmp_path, minilm_dir):
    saved = embed_to(hub, tmp_path, MINILM)
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)
    np.testing.assert_array_equal(saved["input_ids"], local.input_ids)
    meta = json.loads(str(saved["metadata"]))
    assert meta["model"] == MINILM and meta["commit"] == hub.repos[MINILM].sha
    assert meta["weights"] == "embedding tensors only"


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
    np.testing.assert_array_equal(
        npbert.load_weights(next((hub.home / "hub" / "npbert").glob("*/*"))).word_embeddings,
        tensors.word_embeddings,
    )


def test_second_load_makes_no_request(hub, tmp_path):
    first = embed_to(hub, tmp_path, "test/tiny", name="a.npz")
    hub.reset_counts()
    second = embed_to(hub, tmp_path, "test/tiny", name="b.npz")
    assert hub.requests == []
    np.testing.assert_array_equal(first["embeddings"], second["embeddings"])


def test_offline_loads_from_cache_and_fails_clearly_when_not_cached(hub, tmp_path):
    embed_to(hub, tmp_path, "test/tiny")
    hub.reset_counts()
    assert embed_to(hub, tmp_path, "test/tiny", name="o.npz")["embeddings"].shape[-1] == 32
    offline = hub.run("embed", "x", "--model", "test/tiny", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and hub.requests == []
    missing = hub.run("embed", "x", "--model", MINILM, HF_HUB_OFFLINE="1")
    assert missing.returncode == 2 and hub.requests == []
    assert "not in the cache and HF_HUB_OFFLINE is set" in missing.stderr
    assert missing.stderr.count("\n") == 1


def test_unreachable_hub_uses_the_cache_or_says_what_to_do(hub, tmp_path):
    embed_to(hub, tmp_path, "test/tiny")
    closed = "http://127.0.0.1:9"  # discard port: nothing listens on loopback there
    cached = hub.run("embed", "x", "--model", "test/tiny", HF_ENDPOINT=closed)
    assert cached.returncode == 0, cached.stderr
    uncached = hub.run("embed", "x", "--model", "test/sharded", HF_ENDPOINT=closed)
    # huggingface_hub logs its retries (about 20 s of backoff); npbert's own word is one line
    errors = [line for line in uncached.stderr.splitlines() if line.startswith("npbert:")]
    assert uncached.returncode == 2 and len(errors) == 1
    assert "cannot reach http://127.0.0.1:9 and test/sharded is not cached" in errors[0]


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


def test_full_downloads_the_whole_file(hub, tmp_path, minilm_dir):
    saved = embed_to(hub, tmp_path, MINILM, "--full")
    assert hub.bytes_sent >= (minilm_dir / "model.safetensors").stat().st_size
    assert json.loads(str(saved["metadata"]))["weights"] == "full file"
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)


def test_sharded_repo_fetches_only_the_shard_with_the_embeddings(hub, tmp_path):
    saved = embed_to(hub, tmp_path, "test/sharded")
    paths = [path for _, path, _ in hub.requests]
    assert any("model-00002-of-00002" in p for p in paths)
    assert not any("model-00001-of-00002" in p for p in paths)
    local = npbert.Embedder.from_pretrained(TINY)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)


@pytest.mark.parametrize(
    ("repo", "env", "message"),
    [
        ("test/nope", {}, "test/nope: repository not found on http://127.0.0.1"),
        ("test/gated", {}, "test/gated is gated or private (401/403)"),
        ("test/pickled", {}, "has only pytorch_model.bin: npbert reads safetensors"),
        ("not a repo!", {}, "is not a valid Hub repo id"),
        ("test/no-config", {}, "test/no-config: file not found"),
    ],
)
def test_hub_errors_are_one_line_with_exit_2(hub, repo, env, message):
    result = hub.run("embed", "x", "--model", repo, **env)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_gated_repo_loads_with_a_token(hub, tmp_path):
    result = hub.run(
        "embed", "x", "--model", "test/gated", "--out", tmp_path / "g.npz", HF_TOKEN=TOKEN
    )
    assert result.returncode == 0, result.stderr


def test_server_ignoring_range_falls_back_to_a_full_download(hub, tmp_path, minilm_dir):
    hub.ignore_range = True
    saved = embed_to(hub, tmp_path, MINILM)
    local = npbert.Embedder.from_pretrained(minilm_dir)(["I am Sinan", "this is a test sentence"])
    np.testing.assert_array_equal(saved["embeddings"], local.embeddings)
    assert json.loads(str(saved["metadata"]))["weights"] == "full file"


def test_server_ignoring_range_is_reported(hub):
    hub.ignore_range = True
    result = hub.run("fetch", "test/tiny")
    assert result.returncode == 0
    assert "ignored the Range request" in result.stderr
    assert "downloading the whole weights file instead" in result.stderr


def test_connection_dropped_mid_range_caches_nothing_and_retry_succeeds(hub, tmp_path):
    hub.drop_after = 10_000_000  # only the word table's range is longer: it is cut there
    cache = hub.home / "hub" / "npbert"
    first = hub.run("fetch", BASE)
    assert first.returncode == 2, first.stdout
    assert "nothing was cached" in first.stderr and first.stderr.count("\n") == 1
    assert not [p for p in cache.glob("*/*") if not p.name.endswith(".lock")]
    retry = hub.run("fetch", BASE)
    assert retry.returncode == 0, retry.stderr
    assert [p.name for p in cache.glob("*/*") if p.is_dir()] == [hub.repos[BASE].sha]


def test_two_processes_fetching_at_once_both_succeed(hub, bert_base_dir):
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: hub.run("fetch", BASE), range(2)))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    cached = sorted((hub.home / "hub" / "npbert").glob("*/*"))
    assert [p.name for p in cached if p.is_dir()] == [hub.repos[BASE].sha]
    np.testing.assert_array_equal(
        npbert.load_weights(Path(cached[0])).word_embeddings,
        npbert.load_weights(bert_base_dir).word_embeddings,
    )
    assert sum("already cached" in r.stdout for r in results) <= 1
