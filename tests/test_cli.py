"""The npbert command: outputs, the walk-through, and one-line errors with exit 2."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import TINY

import npbert
from npbert.cli import main

SEEDS = ["The quick brown fox jumps over the lazy dog", "I am Sinan", "this is a test sentence"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_embed_texts_to_npz(tmp_path, capsys, minilm_dir):
    out = tmp_path / "seeds.npz"
    code, stdout, _ = run(capsys, "embed", *SEEDS, "--model", minilm_dir, "--out", out)
    assert code == 0 and "wrote" in stdout
    expected = npbert.Embedder.from_pretrained(minilm_dir)(SEEDS)
    with np.load(out, allow_pickle=False) as saved:
        for key in ("embeddings", "input_ids", "token_type_ids", "attention_mask"):
            np.testing.assert_array_equal(saved[key], getattr(expected, key))
        meta = json.loads(str(saved["metadata"]))
    assert meta["texts"] == SEEDS and meta["model"] == str(minilm_dir.resolve())
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file was renamed away


def test_embed_pair(tmp_path, capsys, minilm_dir):
    out = tmp_path / "pair.npz"
    code, _, _ = run(
        capsys, "embed", "Who?", "--pair", "Sinan.", "--model", minilm_dir, "--out", out
    )
    assert code == 0
    with np.load(out) as saved:
        assert saved["token_type_ids"].tolist() == [
            [0] * 4 + [1] * 4
        ]  # [CLS] who ? [SEP] sin ##an . [SEP]


def test_embed_summary_is_readable(capsys, minilm_dir):
    code, stdout, _ = run(capsys, "embed", *SEEDS, "--model", minilm_dir)
    assert code == 0
    assert "embeddings: (3, 11, 384) float32" in stdout
    assert "6 tokens: [CLS] i am sin ##an [SEP]" in stdout
    assert "input_ids: 101 1045 2572 8254 2319 102\n" in stdout
    assert "eps 1e-12" in stdout


def test_embed_ids_file(tmp_path, capsys):
    ids = np.array([[2, 13, 14, 3], [2, 15, 16, 3]])
    types = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "tt.npy", types)
    out = tmp_path / "out.npy"
    code, _, _ = run(
        capsys,
        "embed",
        "--ids-file",
        tmp_path / "ids.npy",
        "--token-type-ids-file",
        tmp_path / "tt.npy",
        "--model",
        TINY,
        "--out",
        out,
    )
    assert code == 0
    np.testing.assert_array_equal(np.load(out), npbert.embed(npbert.load_weights(TINY), ids, types))


def test_explain_walks_through_and_checks(capsys, minilm_dir):
    code, stdout, _ = run(capsys, "explain", "I am Sinan", "--model", minilm_dir)
    assert code == 0
    for step in (
        "LayerNorm((W + T) + P)",
        "1. Tokens",
        "2. Token embeddings",
        "3. Segment embeddings",
        "4. Position embeddings",
        "5. Sum: token + segment + position",
        "6. LayerNorm, normalization",
        "7. LayerNorm, learned scale and shift",
        "8. Dropout",
    ):
        assert step in stdout
    assert "##an" in stdout and "8254" in stdout
    assert "not the fixed sinusoids" in stdout and "not vectors of zeros and ones" in stdout
    diff = re.search(
        r"equals npbert.embed\(\): max \|diff\| = (\S+) \(equal within 1e-05\)", stdout
    )
    assert diff and float(diff[1]) <= 2e-6  # the fast path's tolerance (npbert.fast)


def test_explain_row_values_are_the_weights(capsys):
    from npbert.explain import format_row

    weights = npbert.load_weights(TINY)
    _, stdout, _ = run(capsys, "explain", "i am", "--model", TINY)
    assert format_row(weights.word_embeddings[2]) in stdout  # [CLS] row of the token table


def test_inspect_lists_the_five_tensors(capsys):
    code, stdout, _ = run(capsys, "inspect", TINY)
    assert code == 0
    for name in (
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.LayerNorm.gamma",
        "bert.embeddings.LayerNorm.beta",
        "(128, 32)",
        "F32",
        "layer_norm_eps: 1e-12",
        "max_position_embeddings: 128",
        "type_vocab_size: 2",
    ):
        assert name in stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed", "--model", TINY], "nothing to embed"),
        (["embed", "x", "--model", "./no/such/dir"], "no such checkpoint directory"),
        (["embed", "x", "--model", TINY, "--out", "x.txt"], "use a .npz or .npy"),
        (["embed", "x", "--model", TINY, "--out", "/no/such/dir/x.npz"], "does not exist"),
        (["embed", "a", "b", "--pair", "c", "--model", TINY], "2 TEXT arguments but 1 --pair"),
        (["embed", "x", "--ids-file", "ids.npy", "--model", TINY], "not both"),
        (["embed", "x", "--token-type-ids-file", "t.npy", "--model", TINY], "goes with --ids"),
        (["embed", "--ids-file", "/no/such.npy", "--model", TINY], "No such file"),
        (["embed", "x", "--model", TINY, "--revision", "main"], "revision applies to Hub"),
        (["inspect", "./missing"], "no such checkpoint directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (np.array([[2, -1]]), r"input_ids[0, 1] = -1 is out of range"),
        (np.array([2.5]), "input_ids[0] = 2.5 is not an integer id"),
        (np.array(["a"]), "must be an integer array"),
        (np.array([[2, 3], [4, 5]], dtype=object), "not a readable .npy array"),
    ],
)
def test_bad_ids_file_exits_2(tmp_path, capsys, ids, message):
    np.save(tmp_path / "ids.npy", ids, allow_pickle=True)
    code, _, err = run(capsys, "embed", "--ids-file", tmp_path / "ids.npy", "--model", TINY)
    assert code == 2 and message in err and "Traceback" not in err


def test_console_script_runs_as_a_process(minilm_dir):
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "explain", "I am Sinan", "--model", str(minilm_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "equals npbert.embed()" in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", "x", "--model", "./nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("npbert: error:")


def test_embed_stages_writes_every_stage(tmp_path, capsys):
    out = tmp_path / "stages.npz"
    code, _, _ = run(capsys, "embed", "i am sinan", "--model", TINY, "--stages", "--out", out)
    assert code == 0
    weights = npbert.load_weights(TINY)
    with np.load(out) as saved:
        expected = npbert.embed_stages(weights, saved["input_ids"], saved["token_type_ids"])
        for stage, array in expected.items():
            np.testing.assert_array_equal(saved[stage], array, err_msg=stage)


def test_stages_need_an_npz(capsys):
    code, _, err = run(capsys, "embed", "x", "--model", TINY, "--stages")
    assert code == 2 and "--stages writes every stage to an .npz" in err


def test_texts_may_follow_the_options(capsys):
    code, stdout, _ = run(capsys, "embed", "--model", TINY, "i am", "sinan")
    assert code == 0 and "[1] sinan" in stdout
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage error
        main(["embed", "--model", str(TINY), "x", "--bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and err.count("\n") == 1
