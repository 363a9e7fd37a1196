"""The npbert command: outputs, the walk-through, and one-line errors with exit 2."""

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy
from conftest import DATA, TINY, no_special_tokens

import npbert
from npbert.cli import main
from npbert.stream import read_corpus

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


@pytest.mark.parametrize(
    ("model", "positions"),
    [
        ("tiny-distilbert-sinusoidal", "Fixed sinusoids, as in the original Transformer"),
        ("tiny-distilbert", "Learned in pre-training"),
    ],
)
def test_explain_says_whether_positions_are_learned(capsys, model, positions):
    code, stdout, _ = run(capsys, "explain", "a b", "--model", str(DATA / model))
    assert code == 0
    assert re.search(r"^3\. Position embeddings: .*" + positions, stdout, re.MULTILINE)


def test_inspect_says_where_the_layer_has_no_position_or_token_type_table(capsys):
    """It printed max_position_embeddings: None and "0 token types" where config.json has 64
    and 3 (ModernBERT's rotary positions, Funnel's token types used in attention)."""
    for model in ("tiny-modernbert", "tiny-funnel"):
        code, out, _ = run(capsys, "inspect", str(DATA / model))
        assert code == 0 and "max_position_embeddings: none (no position table)\n" in out
        assert "type_vocab_size: 0 (no token-type table)\n" in out
        assert "no position table, no token-type table, eps" in out


def test_positions_says_which_rows_of_a_roberta_table_it_measured(capsys):
    """Only --json's first_row said that the rows below padding_idx + 1 were left out."""
    code, out, _ = run(capsys, "positions", "--model", str(DATA / "tiny-roberta"))
    rows = npbert.load_weights(DATA / "tiny-roberta").position_embeddings.shape[0]
    assert code == 0 and f"\nrows 2..{rows - 1} of its position table: roberta numbers" in out
    assert "position table: 64 positions" in out
    code, out, _ = run(capsys, "positions", "--model", str(TINY))
    assert code == 0 and "of its position table" not in out


def test_inspect_keeps_its_columns_for_shards_and_names_sinusoidal_positions(tmp_path, capsys):
    """A shard's name pushed the values column out of line; DistilBERT's sinusoidal_pos_embds,
    which explain reads, went unsaid."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(TINY, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    shard = "model-00001-of-00001.safetensors"
    tensors = load_file(str(TINY / "model.safetensors"))
    save_file(tensors, str(tmp_path / "m" / shard))
    index = {"weight_map": dict.fromkeys(tensors, shard)}
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(index))
    code, out, _ = run(capsys, "inspect", str(tmp_path / "m"))
    table = [line for line in out.splitlines() if " values" in line or shard in line]
    assert code == 0 and len(table) > 2
    assert len({line.index(" values") if " values" in line else line.index(" finite")
                for line in table}) == 1  # fmt: skip
    code, out, _ = run(capsys, "inspect", str(DATA / "tiny-distilbert-sinusoidal"))
    assert code == 0 and "\nsinusoidal_pos_embds: True" in out
    code, out, _ = run(capsys, "inspect", str(DATA / "tiny-distilbert"))
    assert code == 0 and "sinusoidal_pos_embds" not in out


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir])
def test_a_config_json_that_is_not_a_file_is_named_as_such(tmp_path, capsys, make):
    """A directory or FIFO named config.json was reported as missing."""
    import shutil

    shutil.copytree(TINY, tmp_path / "m")
    (tmp_path / "m" / "config.json").unlink()
    make(tmp_path / "m" / "config.json")
    code, _, err = run(capsys, "inspect", str(tmp_path / "m"))
    assert code == 2 and "config.json is not a regular file: npbert needs it" in err


@pytest.mark.parametrize("token", [["--token", "hf_SECRET"], ["--token=hf_SECRET"]])
def test_a_token_given_to_a_command_other_than_fetch_is_neither_misread_nor_shown(capsys, token):
    """argparse took --token for --token-type-ids-file, and printed the token, a secret, as a
    missing file: the advice for a gated repo said to pass --token."""
    with pytest.raises(SystemExit) as ended:
        main(["embed", "hi", "--model", str(TINY), *token])
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and not out and "hf_SECRET" not in err
    assert "--token is an option of npbert fetch alone" in err and err.count("\n") == 1


def test_an_option_given_by_the_start_of_its_name_is_named_not_guessed(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["embed", "hi", "--model", str(TINY), "--rev", "main"])
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and not out
    assert "unrecognized arguments: --rev main (see npbert embed --help)" in err


def test_explain_says_a_learned_table_that_holds_the_sinusoids(capsys, tmp_path):
    """It said "not the fixed sinusoids" from the family alone, where `positions` said
    sinusoidal of the same table."""
    from npbert.analysis.positions import sinusoidal_table

    shape = npbert.load_weights(TINY).position_embeddings.shape
    model = tiny_words(tmp_path, sinusoidal_table(*shape), tensor="position_embeddings.weight")
    code, stdout, _ = run(capsys, "explain", "a b", "--model", str(model))
    assert code == 0 and "not the fixed sinusoids" not in stdout
    assert "this checkpoint's table holds the fixed sinusoids of the original" in stdout


def test_explain_says_a_sinusoidal_config_whose_table_is_not_sinusoids(capsys, tmp_path):
    """The flag alone named the table fixed sinusoids "not trained"; transformers uses the
    stored table, whatever it holds."""
    shutil.copytree(DATA / "tiny-distilbert-sinusoidal", tmp_path / "m")
    tensors = safetensors.numpy.load_file(tmp_path / "m" / "model.safetensors")
    name = next(k for k in tensors if k.endswith("position_embeddings.weight"))
    tensors[name][3, 1] += 0.5
    safetensors.numpy.save_file(tensors, tmp_path / "m" / "model.safetensors")
    code, stdout, _ = run(capsys, "explain", "a b", "--model", str(tmp_path / "m"))
    assert code == 0 and "Fixed sinusoids" not in stdout
    assert "the stored table differs from the sinusoids by up to 0.5;" in stdout


def test_explain_puts_dropout_before_a_projection_after_the_layer(capsys):
    code, stdout, _ = run(capsys, "explain", "a b", "--model", str(DATA / "tiny-electra"))
    steps = re.findall(r"^(\d+)\. (\w+)", stdout, re.MULTILINE)
    assert code == 0 and steps[-2:] == [("8", "Dropout"), ("9", "Projection")]


def test_explain_puts_big_birds_dropout_before_its_layer_norm(capsys):
    """As BigBirdEmbeddings applies it: it came last, "so this is the layer's output"."""
    code, stdout, _ = run(capsys, "explain", "a b", "--model", str(DATA / "tiny-big-bird"))
    steps = [word for _, word in re.findall(r"^(\d+)\. (\w+)", stdout, re.MULTILINE)]
    assert code == 0 and steps[-4:] == ["Sum", "Dropout", "LayerNorm", "LayerNorm"]
    assert "layer's output" not in stdout


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
        r"npbert.embed\(\), the fast path, against these steps: "
        r"max \|diff\| = (\S+) \(equal within 1e-05\)",
        stdout,
    )
    assert diff and float(diff[1]) <= 2e-6  # the fast path's tolerance (npbert.layer.fast)


def test_explain_from_python_shows_the_default_token_types():
    from npbert.analysis.explain import explain

    weights = npbert.load_weights(TINY)
    text, equal = explain(weights, ["[CLS]", "a", "[SEP]"], [2, 5, 3], None, None)
    assert equal and "Segment embeddings: row 0 of" in text  # was "rows None", then "rows 0"
    assert "token_type_id" in text
    one, _ = explain(weights, ["a"], [5], None, None)
    assert "Position embeddings: row 0 of" in one  # was "rows 0..0"
    pair, _ = explain(weights, ["[CLS]", "a", "[SEP]", "b"], [2, 5, 3, 6], [0, 0, 0, 1], None)
    assert "Segment embeddings: rows 0, 1 of" in pair and "Position embeddings: rows 0..3" in pair
    apart, _ = explain(weights, ["a", "b", "c"], [5, 6, 7], None, None, [0, 5, 63])
    assert "Position embeddings: rows 0, 5, 63 of" in apart  # was "rows 0..63"
    many, _ = explain(weights, ["a"] * 9, [5] * 9, None, None, list(range(0, 90, 10)))
    assert "Position embeddings: 9 rows from 0 to 80 of" in many


def test_explain_names_the_width_a_projection_makes():
    from npbert.analysis.explain import explain

    weights = npbert.load_weights(TINY.parent / "tiny-deberta-v2")  # E 16 -> H 32 inside
    config = weights.config
    text, _ = explain(weights, ["[CLS]", "a"], [1, 5], None, None)
    projected = f"width {config.embedding_size}, projected to {config.hidden_size}"
    assert config.embedding_size != config.hidden_size and projected in text.splitlines()[0]
    assert "width 32\n" in explain(npbert.load_weights(TINY), ["a"], [5], None, None)[0]


@pytest.mark.parametrize(
    ("tokens", "input_ids", "message"),
    [
        (["a"], [2, 5, 3], "a token per id: 1 for 3 ids"),  # was a walk-through of 1, "ok"
        (["a", "b", "c", "d"], [2, 5, 3], "a token per id: 4 for 3 ids"),  # was IndexError
        (["a", "b"], [[2, 5], [3, 4]], "one text: input_ids (L,), not (2, 2)"),  # TypeError
        ("abc", [2, 5, 3], "tokens as a list of strings"),
    ],
)
def test_explain_from_python_refuses_what_is_not_one_tokenized_text(tokens, input_ids, message):
    from npbert.analysis.explain import explain

    with pytest.raises(npbert.InputError, match=re.escape(message)):
        explain(npbert.load_weights(TINY), tokens, input_ids, None, None)


def test_explain_checks_large_outputs_in_float32_steps(capsys, tmp_path):
    # gamma x 300: outputs of a few hundred, where 1e-5 is less than one float32 step.
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(TINY, tmp_path / "m")
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    tensors["bert.embeddings.LayerNorm.gamma"] *= 300
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    text = "i am sinan and this is a longer text about the layer"
    code, stdout, _ = run(capsys, "explain", text, "--model", tmp_path / "m")
    diff = re.search(r"max \|diff\| = (\S+) \(equal within (\S+)\)", stdout)
    assert code == 0 and diff, stdout.splitlines()[-1]
    assert 1e-5 < float(diff[2]) < 2e-3


def test_explain_row_values_are_the_weights(capsys):
    from npbert.analysis.explain import format_row

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
        "model.safetensors  finite, |x| <= ",
    ):
        assert name in stdout


HUB_PAGE = "https://huggingface.co"  # a repo's web address, pasted for its id: no request


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed", "--model", TINY], "nothing to embed"),
        (["embed", "x", "--model", "./no/such/dir"], "no such checkpoint directory"),
        (["embed", "x", "--model", TINY, "--out", "x.txt"], "use a .npz or .npy"),
        (["embed", "x", "--model", TINY, "--out", "/no/such/dir/x.npz"], "does not exist"),
        (["embed", "a", "b", "--pair", "c", "--model", TINY], "2 TEXT arguments but 1 --pair"),
        (["embed", "x", "--ids-file", "ids.npy", "--model", TINY], "not both"),
        (["embed", "--ids-file", "i.npy", "--truncate", "--model", TINY], "does nothing to"),
        (["embed", "x", "--token-type-ids-file", "t.npy", "--model", TINY], "goes with --ids"),
        (["embed", "--ids-file", "/no/such.npy", "--model", TINY], "--ids-file /no/such.npy: no"),
        (["embed", "--ids-file", "/tmp", "--model", TINY], "--ids-file /tmp is a directory"),
        (["embed", "--ids-file", "/dev/null", "--model", TINY], "/dev/null: not a regular file"),
        (["embed", "x", "--model", TINY, "--revision", "main"], "revision applies to Hub"),
        (["inspect", "./missing"], "no such checkpoint directory"),
        (["inspect", "o/m/sub"], "no such checkpoint directory, and not a Hub repo id, which"),
        (["embed", "x", "--model", f"{HUB_PAGE}/o/m"], "give the repo id, o/m ("),
        (["fetch", f"{HUB_PAGE}/o/m/tree/v1/x"], "give the repo id, o/m, and the revision v1"),
        (["inspect", f"{HUB_PAGE}/bert-base-uncased/blob/main/config.json"], "id, bert-base-un"),
        (["embed", "x", "--model", TINY / "config.json"], "config.json is a file: give the"),
        (["embed", "x", "--model", ""], "the model is empty"),  # not the current directory
        (["inspect", ""], "the model is empty"),
        (["embed", "x", "--model", TINY, "--full"], "full applies to Hub repo ids"),
        (["embed", "--input", "", "--out", "o", "--model", TINY], "--input is empty"),
        (["fetch", ""], "the repo id is empty"),
        (["fetch", "a/b", "--revision", ""], "the revision is empty"),
        (["fetch", "a/b", "--cache-dir", ""], "the cache directory is empty"),
        (["fetch", "a/b", "--token", ""], "the token is empty"),  # not a network error
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_out_naming_a_directory_is_one_line_that_names_it(capsys, tmp_path):
    (tmp_path / "d.npz").mkdir()
    code, _, err = run(capsys, "embed", "x", "--model", TINY, "--out", str(tmp_path / "d.npz"))
    assert code == 2 and f"--out {tmp_path / 'd.npz'} is a directory" in err
    assert err.count("\n") == 1 and not list((tmp_path / "d.npz").iterdir())


@pytest.mark.parametrize(("suffix", "stages"), [(".NPZ", False), (".Npy", False), (".NPZ", True)])
def test_out_suffixes_are_read_in_any_case(capsys, tmp_path, suffix, stages):
    path = tmp_path / f"e{suffix}"
    argv = ["embed", "x", "--model", TINY, "--out", str(path), *(["--stages"] if stages else [])]
    code, _, _ = run(capsys, *argv)
    magic = b"PK" if suffix.lower() == ".npz" else b"\x93NUMPY"  # a zip, or one array
    assert code == 0 and path.read_bytes().startswith(magic)


@pytest.mark.skipif(not os.path.exists("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    "argv",
    [
        ("embed", "x", "--model", TINY, "--out", "/proc/npbert-test.npz"),
        ("vectors", "--model", TINY, "--out", "/proc/npbert-test"),  # a directory of files
        ("embed", "--input", TINY / "vocab.txt", "--model", TINY, "--out", "/proc/npbert-test"),
    ],
    ids=["texts", "vectors", "corpus"],
)
def test_an_out_that_cannot_be_created_is_named_not_its_temporary(capsys, argv):
    """In /proc, where no file can be created, even by root: the error names the option and
    the path given (the OS's reason named the path alone), not a temporary."""
    target = argv[-1]
    code, _, err = run(capsys, *argv)
    assert code == 2 and err == f"npbert: error: --out {target}: No such file or directory\n", err


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (np.array([[2, -1]]), r"input_ids[0, 1] = -1 is out of range"),
        (np.array([2.5]), "input_ids[0] = 2.5 is not an integer id"),
        (np.array(["a"]), "must be an integer array"),
        (
            np.array([[2, 3], [4, 5]], dtype=object),
            "an array of Python objects, stored as a pickle",
        ),
    ],
)
def test_bad_ids_file_exits_2(tmp_path, capsys, ids, message):
    np.save(tmp_path / "ids.npy", ids, allow_pickle=True)
    code, _, err = run(capsys, "embed", "--ids-file", tmp_path / "ids.npy", "--model", TINY)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "array", "message"),
    [
        ("--ids-file", [[2, -1, 3]], "input_ids[0, 1] = -1 is out of range"),
        ("--token-type-ids-file", [[0, 5, 0]], "token_type_ids[0, 1] = 5 is out of range"),
        ("--token-type-ids-file", [[0, 0]], "token_type_ids has shape (1, 2)"),
        ("--attention-mask-file", [[1, 2, 1]], "attention_mask[0, 1] = 2 is not 0 or 1"),
    ],
)
def test_a_bad_input_file_is_named_with_its_array(tmp_path, capsys, option, array, message):
    files = {"--ids-file": [[2, 5, 3]], option: array}
    argv = ["embed", "--model", TINY]
    for flag, values in files.items():
        path = tmp_path / f"{flag.strip('-')}.npy"
        np.save(path, np.array(values))
        argv += [flag, path]
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"{option} {tmp_path / option.strip('-')}.npy: {message}" in err, err


@pytest.mark.slow
def test_console_script_runs_as_a_process(minilm_dir):
    result = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "explain", "I am Sinan", "--model", str(minilm_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "npbert.embed(), the fast path, against these steps" in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "npbert.cli", "embed", "x", "--model", "./nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("npbert: error:")


def test_embed_stages_writes_every_stage(tmp_path, capsys):
    out = tmp_path / "stages.npz"
    code, stdout, _ = run(capsys, "embed", "i am sinan", "--model", TINY, "--stages", "--out", out)
    assert code == 0  # and says so: it named the embeddings alone
    assert stdout.endswith("\n  and the stages word, token_type, position, sum, normalized\n")
    weights = npbert.load_weights(TINY)
    with np.load(out) as saved:
        expected = npbert.embed_stages(weights, saved["input_ids"], saved["token_type_ids"])
        for stage, array in expected.items():
            np.testing.assert_array_equal(saved[stage], array, err_msg=stage)


def test_stages_need_an_npz(capsys):
    code, _, err = run(capsys, "embed", "x", "--model", TINY, "--stages")
    assert code == 2 and "--stages writes every stage to an .npz" in err


@pytest.mark.parametrize("family", ["tiny-albert", "tiny-electra", "tiny-roformer"])
def test_embed_project_saves_projected_under_its_name_and_compare_checks_it(
    tmp_path, capsys, family
):
    model, ids, out = DATA / family, tmp_path / "ids.npy", tmp_path / "projected.npz"
    np.save(ids, [[2, 7, 5, 3], [2, 9, 3, 0]])
    given = ("--model", model, "--ids-file", ids)
    code, stdout, _ = run(capsys, "embed", *given, "--project", "--out", out)
    assert code == 0 and "projected (2, 4," in stdout
    weights = npbert.load_weights(model)
    with np.load(out) as saved:
        embeddings, projected = saved["embeddings"], saved["projected"]
    np.testing.assert_array_equal(embeddings, npbert.embed(weights, np.load(ids)))
    np.testing.assert_array_equal(projected, npbert.embed(weights, np.load(ids), project=True))
    assert projected.shape[-1] == weights.config.hidden_size != embeddings.shape[-1]
    code, stdout, _ = run(capsys, "compare", out, *given)
    assert code == 0 and "  projected      ok" in stdout and "projected: float32 ULPs" in stdout


def test_a_projected_npy_is_compared_as_projected_by_its_shape(tmp_path, capsys):
    """A .npy names no output: it was read as embeddings, and --project's own file failed."""
    model, out = DATA / "tiny-albert", tmp_path / "projected.npy"
    code, stdout, _ = run(capsys, "embed", "i am", "--model", model, "--project", "--out", out)
    assert code == 0 and stdout.startswith(f"wrote {out}: projected")
    code, stdout, _ = run(capsys, "compare", out, "--model", model, "i am")
    assert code == 0 and "  projected      ok" in stdout and "embeddings " not in stdout
    np.savez(tmp_path / "named.npz", embeddings=np.load(out))  # named: held to its name
    code, stdout, _ = run(capsys, "compare", tmp_path / "named.npz", "--model", model, "i am")
    assert code == 1 and "this is the shape of 'projected'" in stdout


def test_an_npy_that_fits_the_output_and_its_projection_is_refused(tmp_path, capsys):
    """An ALBERT of E = H projects all the same: its two outputs have one shape."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(DATA / "tiny-albert", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    hidden, width = config["hidden_size"], config["embedding_size"]
    for name in list(tensors):
        if name.startswith("albert.embeddings."):
            tensors[name] = np.resize(tensors[name], (*tensors[name].shape[:-1], hidden))
        if "embedding_hidden_mapping_in.weight" in name:
            tensors[name] = np.resize(tensors[name], (hidden, hidden))
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "embedding_size": hidden}))
    assert width != hidden
    out = tmp_path / "p.npy"
    code, _, _ = run(capsys, "embed", "i am", "--model", tmp_path / "m", "--project", "--out", out)
    assert code == 0
    code, _, err = run(capsys, "compare", out, "--model", tmp_path / "m", "i am")
    assert code == 2 and "has the shape of both the layer's output and its projection" in err


def test_embed_project_on_a_family_without_projection_saves_embeddings(tmp_path, capsys):
    out = tmp_path / "bert.npz"
    code, _, _ = run(capsys, "embed", "i am", "--model", TINY, "--project", "--out", out)
    with np.load(out) as saved:
        assert code == 0 and "projected" not in saved and "embeddings" in saved


def test_texts_may_follow_the_options(capsys):
    code, stdout, _ = run(capsys, "embed", "--model", TINY, "i am", "sinan")
    assert code == 0 and "[1] sinan" in stdout
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage error
        main(["embed", "--model", str(TINY), "x", "--bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and err.count("\n") == 1


def test_files_a_shell_glob_gave_after_input_are_named(tmp_path, capsys):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("x\n")
    argv = ["embed", "--input", tmp_path / "a.txt", tmp_path / "b.txt", "--out", tmp_path / "o"]
    with pytest.raises(SystemExit) as exit_info:
        main([*map(str, argv), "--model", str(TINY)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"unrecognized arguments: {tmp_path / 'b.txt'} (see" in err


def test_options_that_add_up_may_be_repeated(capsys):
    code, stdout, _ = run(capsys, "embed", "i", "am", "--pair", "a", "--pair", "b", "--model", TINY)
    assert code == 0 and "[1] am" in stdout


def npbert_process(*argv, **kwargs) -> subprocess.CompletedProcess:
    """`python -m npbert ARGV` as a process, bounded in time; arguments may be bytes."""
    kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([sys.executable, "-m", "npbert", *argv], timeout=120, **kwargs)


def one_line_error(result: subprocess.CompletedProcess, message: str = "") -> bool:
    err = result.stderr.decode(errors="replace")
    return (
        result.returncode == 2
        and err.startswith("npbert: error: ")
        and err.count("\n") == 1
        and message in err
        and "Traceback" not in err
    )


def test_summary_counts_a_literal_pad_in_the_text_as_a_token(capsys, minilm_dir):
    # The text's own "[PAD]" is the pad token; the summary used to drop every "[PAD]" string,
    # the text's included, and so showed 4 tokens and the ids of another row's length.
    texts = ["hello [PAD] world", "a longer text, so that the first one is padded"]
    code, stdout, _ = run(capsys, "embed", *texts, "--model", minilm_dir)
    expected = npbert.Embedder.from_pretrained(minilm_dir)(texts[0])
    assert code == 0 and expected.tokens == ["[CLS]", "hello", "[PAD]", "world", "[SEP]"]
    assert "    5 tokens: [CLS] hello [PAD] world [SEP]\n" in stdout
    assert f"    input_ids: {' '.join(map(str, expected.input_ids))}\n" in stdout
    from npbert.analysis.explain import format_row

    first_text = stdout.split("[1] ")[0]
    assert f"last  {format_row(expected.embeddings[-1])}" in first_text  # [SEP], not padding


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed", b"\xff", "--model", TINY], "texts[0] is not valid Unicode"),
        (["embed", "ok", "--pair", b"a\xffb", "--model", TINY], "pairs[0] is not valid Unicode"),
        (["embed", b"\xed\xa0\x80", "--model", TINY], "texts[0] is not valid Unicode"),  # U+D800
        (["explain", b"caf\xe9", "--model", TINY], "texts[0] is not valid Unicode"),  # Latin-1
        (["explain", "ok", "--pair", b"\xed\xb0\x80", "--model", TINY], "pairs[0] is not valid"),
        (["compare", "c.npy", "--model", TINY, b"\xff"], "texts[0] is not valid Unicode"),
    ],
)
def test_text_that_is_not_utf8_is_one_line_error(tmp_path, argv, message):
    np.save(tmp_path / "c.npy", np.zeros((1, 3, 32)))
    argv = [a if isinstance(a, bytes) else str(a) for a in argv]
    assert one_line_error(npbert_process(*argv, cwd=tmp_path), message)


def crafted_npy(path, claimed: int = 10**11, descr: str = "<i8"):
    """A 145-byte .npy whose header claims `claimed` elements (int64 unless `descr`)."""
    import io

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": (claimed,)}
    )
    path.write_bytes(header.getvalue().ljust(145, b"\0"))
    return path


@pytest.mark.parametrize("option", ["--ids-file", "--token-type-ids-file"])
def test_npy_header_claiming_more_than_the_file_holds(tmp_path, capsys, option):
    np.save(tmp_path / "ids.npy", np.array([[2, 13, 3]]))
    files = {"--ids-file": tmp_path / "ids.npy", option: crafted_npy(tmp_path / "crafted.npy")}
    argv = ["embed", "--model", TINY]
    for name, path in files.items():
        argv += [name, path]
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1
    assert f"{option} {tmp_path / 'crafted.npy'}: its header describes a (100000000000,)" in err
    assert "800,000,000,000 bytes, but only 17 bytes follow the header" in err


@pytest.mark.parametrize("descr", ["|V0", "<U0", "|S0"])
def test_npy_of_a_dtype_without_bytes_is_refused(tmp_path, capsys, descr):
    ids = crafted_npy(tmp_path / "v0.npy", descr=descr)  # 0 bytes a row: passes the size check
    code, _, err = run(capsys, "embed", "--model", TINY, "--ids-file", ids)
    assert code == 2 and err.count("\n") == 1, err
    assert f"--ids-file {ids}: its dtype {np.dtype(descr)} has no bytes per element" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed", "--input", "c.txt", "--out", "o", "--workers", "0"], "--workers: must"),
        (["embed", "--input", "c.txt", "--out", "o", "--workers", "1.5"], "whole number"),
        (["embed", "--input", "c.txt", "--out", "o", "--shard-bytes", "-1"], "at least 1"),
        (["compare", "c.npy", "x", "--atol", "-1"], "--atol: the tolerance must be"),
        (["compare", "c.npy", "x", "--atol", "nan"], "--atol: the tolerance must be"),
        (["compare", "c.npy", "x", "--rtol", "inf"], "--rtol: the tolerance must be"),
        (["compare", "c.npy", "x", "--rtol", "bogus"], "--rtol: the tolerance must be"),
        (["compare", "c.npy", "x", "--atol", "1e400"], "at least 0, got '1e400'"),  # not inf
    ],
)
def test_bad_numbers_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--model", str(TINY)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly_as_sigpipe(tmp_path):
    import os
    import signal

    np.save(tmp_path / "ids.npy", np.full((2000, 8), 5))  # a summary far past a pipe's buffer
    argv = ["embed", "--ids-file", "ids.npy", "--model", str(TINY)]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before npbert writes a byte
    try:
        closed = npbert_process(*argv, cwd=tmp_path, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert closed.returncode == -signal.SIGPIPE and closed.stderr == b""  # as `ls`, `git`
    pipeline = 'set -o pipefail; "$@" | head -1; echo "status $?"'
    command = [sys.executable, "-m", "npbert", *argv]
    shell = subprocess.run(
        ["bash", "-c", pipeline, "bash", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.stdout == f"model: {TINY}\nstatus 141\n" and shell.stderr == ""


@pytest.mark.slow
def test_version_and_python_dash_m():
    version = f"npbert {npbert.__version__}\n".encode()
    assert npbert_process("--version").stdout == version
    assert main_process("--version").stdout == version
    result = npbert_process("inspect", str(TINY))
    assert result.returncode == 0 and b"word_embeddings" in result.stdout


def main_process(*argv, before: str = "") -> subprocess.CompletedProcess:
    """The console script's entry point, as the installed package names it, as a process;
    `before`: Python run first."""
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="npbert")
    module, function = script.module, script.attr
    code = f"{before}\nimport sys; from {module} import {function}; sys.exit({function}())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, timeout=60)


def subcommands(corpus: bool = False) -> dict:
    from npbert.cli import build_parser

    parser = build_parser(corpus)
    return next(a for a in parser._actions if a.choices).choices  # argparse's subparsers


@pytest.mark.parametrize(
    "name", ["embed", "embed --input", "explain", "compare", "vectors", "inspect", "fetch"]
)
def test_help_has_a_description_examples_defaults_and_help_for_every_option(name, capsys):
    command = subcommands(corpus=name == "embed --input")[name.split()[0]]
    prefix = "examples:\n  npbert " + name
    assert command.description and command.epilog.startswith(prefix)
    for action in command._actions:
        assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        if action.default not in (None, False, argparse.SUPPRESS, []):  # []: no TEXT
            assert "%(default)" in action.help, f"{name} {action.dest}: default not shown"
    with pytest.raises(SystemExit):
        main([*name.split(), *(["FILE"] if name == "embed --input" else []), "--help"])
    out = capsys.readouterr().out
    assert prefix in out
    if name == "embed --input":
        assert "(default: 65536," in out and "(default: float32)" in out
    if name == "compare":
        assert "(default: 1e-5, or where a stage" in " ".join(out.split())


def test_inspect_takes_the_model_as_other_commands_do(capsys):
    code, by_option, _ = run(capsys, "inspect", "--model", TINY)
    assert code == 0 and by_option == run(capsys, "inspect", TINY)[1]
    for argv in (["inspect"], ["inspect", TINY, "--model", TINY]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "give the model once" in err


def test_texts_after_double_dash_may_start_with_a_dash(tmp_path, capsys):
    code, stdout, _ = run(capsys, "embed", "--model", TINY, "i", "--", "-5 am", "--pair")
    assert code == 0 and "[1] -5 am" in stdout and "[2] --pair" in stdout
    weights = npbert.load_weights(TINY)
    encoding = npbert.Embedder.from_pretrained(TINY).encode(["-5 am"])
    np.save(tmp_path / "c.npy", npbert.embed(weights, encoding.input_ids))
    code, stdout, _ = run(capsys, "compare", tmp_path / "c.npy", "--model", TINY, "--", "-5 am")
    assert code == 0 and "PASS" in stdout


def test_ids_file_npz_holds_token_types_and_mask(tmp_path, capsys):
    ids = np.array([[2, 13, 14, 3], [2, 15, 16, 3]], dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    code, _, _ = run(
        capsys, "embed", "--ids-file", tmp_path / "ids.npy", "--model", TINY, "--out",
        tmp_path / "out.npz",
    )  # fmt: skip
    assert code == 0
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_array_equal(saved["input_ids"], ids)
        np.testing.assert_array_equal(saved["token_type_ids"], np.zeros_like(ids))
        np.testing.assert_array_equal(saved["attention_mask"], np.ones_like(ids))
        np.testing.assert_array_equal(
            saved["embeddings"], npbert.embed(npbert.load_weights(TINY), ids)
        )
    types = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    np.save(tmp_path / "tt.npy", types)
    code, _, _ = run(
        capsys, "embed", "--ids-file", tmp_path / "ids.npy", "--token-type-ids-file",
        tmp_path / "tt.npy", "--model", TINY, "--out", tmp_path / "typed.npz",
    )  # fmt: skip
    with np.load(tmp_path / "typed.npz") as saved:
        np.testing.assert_array_equal(saved["token_type_ids"], types)


def test_ids_file_with_an_attention_mask_file(tmp_path, capsys):
    deberta = TINY.parent / "tiny-deberta"  # the one layer that uses the mask
    ids, mask = np.array([[1, 13, 14, 2], [1, 15, 2, 0]]), np.array([[1, 1, 1, 1], [1, 1, 1, 0]])
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    argv = ["embed", "--ids-file", tmp_path / "ids.npy", "--model", deberta]
    code, _, err = run(capsys, *argv, "--attention-mask-file", tmp_path / "mask.npy",
                       "--out", tmp_path / "out.npz")  # fmt: skip
    assert code == 0, err
    expected = npbert.embed(npbert.load_weights(deberta), ids, attention_mask=mask)
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_array_equal(saved["attention_mask"], mask)
        np.testing.assert_array_equal(saved["embeddings"], expected)
        assert not saved["embeddings"][1, 3].any() and saved["embeddings"][1, 2].any()
    np.save(tmp_path / "bad.npy", mask[:, :3])
    code, _, err = run(capsys, *argv, "--attention-mask-file", tmp_path / "bad.npy")
    assert code == 2 and "attention_mask" in err and "(2, 3)" in err and err.count("\n") == 1
    code, _, err = run(capsys, "embed", "x", "--model", deberta, "--attention-mask-file", "m.npy")
    assert code == 2 and "--attention-mask-file goes with --ids-file" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "closed", "message"),
    [
        (("embed", "x", "--model", TINY), 1, "standard output is closed"),
        (("embed", "--input", "-", "--out", "o", "--model", TINY), 0,
         "--input -: standard input is closed"),
    ],
)  # fmt: skip
def test_a_closed_standard_stream_is_one_line(tmp_path, argv, closed, message):
    """Started with stdout (>&-) or stdin (<&-) closed, where Python's sys.stdout or stdin is
    None: an AttributeError deep inside, before."""
    result = subprocess.run(
        [sys.executable, "-m", "npbert", *map(str, argv)], stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: os.close(closed), cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr == f"npbert: error: {message}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize(
    "argv",
    [
        ("inspect", TINY),
        ("embed", "x", "--model", TINY),
        ("embed", "x", "--model", TINY, "--out", "x.npz"),
        ("embed", "--input", "c.txt", "--out", "o", "--model", TINY, "--quiet"),
    ],
)
def test_a_full_standard_output_is_named_as_such(tmp_path, argv):
    # Its OSError names no file: said bare, it read as if the --out file could not be written
    # (and an OSError's message without a file name has no dangling colon).
    (tmp_path / "c.txt").write_text("a b\nc\n")
    with open("/dev/full", "wb") as full:
        result = npbert_process(*map(str, argv), stdout=full, cwd=tmp_path)
    message = "cannot write to standard output (No space left on device)"
    assert one_line_error(result, message)


def test_the_summary_shows_no_rows_for_a_text_of_no_tokens(tmp_path, capsys):
    """With a tokenizer that adds no special tokens, an empty text has no rows: the summary
    showed the padding's as its first and last."""
    code, out, _ = run(capsys, "embed", "", "a", "--model", no_special_tokens(tmp_path))
    empty, other = out.split("\n\n")[1:]
    assert code == 0 and "0 tokens" in empty and "first" not in empty and "last" not in empty
    assert "1 tokens: a" in other and "first" in other and "last" in other


@pytest.mark.parametrize("argv", [["embed", ""], ["embed", " ", ""], ["explain", ""]])
def test_texts_of_no_tokens_at_all_are_refused_by_what_they_are(tmp_path, capsys, argv):
    """Nothing to embed: it was "input_ids is empty", which names no input of the command."""
    code, out, err = run(capsys, *argv, "--model", no_special_tokens(tmp_path))
    assert code == 2 and "model:" not in out  # explain printed its model line first
    assert err == (
        "npbert: error: no text gives a token: the tokenizer adds no special tokens, and the "
        "text is empty or whitespace: nothing to embed\n"
    )


def tiny_words(tmp_path, value, columns=slice(None), tensor="word_embeddings.weight"):
    """tiny-bert with its word table's `columns` (or another embeddings tensor's) set to
    `value`, in tmp_path / "m"."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(TINY, tmp_path / "m")
    tensors = load_file(str(TINY / "model.safetensors"))
    tensors[f"bert.embeddings.{tensor}"][..., columns] = value
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    return tmp_path / "m"


LAYER_WARNING = "NaN, Inf or a float32 overflow in the layer: the checkpoint's tensors hold"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "columns", "corpus_warning"),
    [
        (np.inf, slice(None), "the checkpoint's word_embeddings holds NaN or Inf (npbert"),
        (np.nan, slice(None), "the checkpoint's word_embeddings holds NaN or Inf (npbert"),
        # the variance overflows: the token embeds as beta (torch: NaN); float64 computes it
        (1e20, 0, "the checkpoint's tensors hold values up to 1e+20, too large for float32"),
    ],
)
def test_weights_float32_cannot_compute_are_one_warning_line(tmp_path, value, columns,
                                                             corpus_warning):  # fmt: skip
    """Shards of NaN were written with exit 0 and only NumPy's RuntimeWarning, which named a
    line of npbert/fast.py (and showed despite --quiet); NaN alone (NumPy is silent on it) and
    an overflow to beta said nothing at all."""
    model = tiny_words(tmp_path, value, columns)
    (tmp_path / "c.txt").write_text("a b c\n")
    for argv, warning in (
        (["x", "--out", tmp_path / "x.npy"], LAYER_WARNING),
        (["--input", tmp_path / "c.txt", "--out", tmp_path / "o", "--quiet"], corpus_warning),
    ):
        result = npbert_process("embed", *map(str, argv), "--model", str(model))
        err = result.stderr.decode()
        assert result.returncode == 0 and err.count("\n") == 1, err
        assert err.startswith(f"npbert: warning: {warning}"), err
    assert np.isnan(np.load(tmp_path / "x.npy")).all() == (not np.isfinite(value))  # written


@pytest.mark.slow
def test_float16_shards_warn_of_outputs_past_float16s_range(tmp_path):
    """Values past 65504 were written as Inf with exit 0 and no word (gamma 1e5 here: rows of
    32 reach 5.7e5); float32 shards of the same are finite and need no warning."""
    model = tiny_words(tmp_path, 1e5, tensor="LayerNorm.gamma")
    (tmp_path / "c.txt").write_text("a b c\n")
    warning = "npbert: warning: this checkpoint's outputs may reach 5.66e+05, past float16's"
    for dtype, warned in (("float16", True), ("float32", False)):
        out = tmp_path / dtype
        argv = ["--input", tmp_path / "c.txt", "--out", out, "--dtype", dtype, "--quiet"]
        result = npbert_process("embed", *map(str, argv), "--model", str(model))
        err = result.stderr.decode()
        assert result.returncode == 0 and err.startswith(warning) == warned, err
        assert err.count("\n") == warned
        assert np.isinf(next(read_corpus(out))).any() == warned


@pytest.mark.slow
@pytest.mark.parametrize("row", [slice(None), 37], ids=["every row", "a row no case uses"])
def test_vectors_of_a_checkpoint_holding_inf_is_one_line(tmp_path, row):
    """Refused once a case looked the row up (NumPy's warning first), and not at all where
    none did: the vectors of a broken checkpoint were written without a word."""
    import shutil

    from safetensors.numpy import load_file, save_file

    model = tmp_path / "m"
    shutil.copytree(TINY, model)
    tensors = load_file(str(TINY / "model.safetensors"))
    tensors["bert.embeddings.word_embeddings.weight"][row, 3] = np.inf
    save_file(tensors, str(model / "model.safetensors"))
    refused = npbert_process("vectors", "--model", str(model), "--out", str(tmp_path / "v"))
    message = "the checkpoint's word_embeddings holds NaN or Inf (npbert inspect shows where)"
    assert one_line_error(refused, message), refused.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("value", "columns"), [(1e37, slice(None)), (1e20, 0)])
def test_vectors_of_weights_float32_cannot_compute_warn_though_no_nan_results(
    tmp_path, value, columns
):
    """1e37 in every word column: float32 centers rows of 1e37 to wrong values, and wrote them
    without a word, its float64 files right and its float32 files not. (1e20 in one: the
    square overflows, and NumPy's warning was said after the run.)"""
    model = tiny_words(tmp_path, value, columns)
    result = npbert_process("vectors", "--model", str(model), "--out", str(tmp_path / "v"))
    err = result.stderr.decode()
    assert result.returncode == 0 and err.count("\n") == 1, err
    assert err.startswith(
        f"npbert: warning: the checkpoint's tensors hold values up to {value:.3g}"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "value", "columns"),
    [
        (["explain", "a b c"], 1e20, 0),  # the square overflows
        (["explain", "a b c"], 3e37, slice(None)),  # the mean's sum, in numpy/_core/_methods.py
    ],
)
def test_an_overflow_in_explain_or_vectors_is_one_warning_line(tmp_path, command, value, columns):
    """Finite output (beta) that float32 got wrong: no NaN for their own checks to catch.
    NumPy's own warning from its own files showed as well."""
    model = tiny_words(tmp_path, value, columns)
    result = npbert_process(*command, "--model", str(model), cwd=tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 0 and err.count("\n") == 1, err
    assert err.startswith(f"npbert: warning: {LAYER_WARNING}"), err


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("tiny-big-bird", {"word_embeddings": 1e18}),  # times sqrt(H) when looked up
        ("tiny-deberta-v2", {"projection_weight": 1e19}),  # projected before normalizing
        ("tiny-bert", {"layer_norm_weight": 1e37, "layer_norm_bias": 3e38}),
    ],
)
def test_float32_trouble_counts_every_step_that_scales(name, change):
    """Each of these passed the bound, and a corpus of them was written wrong, unwarned."""
    import dataclasses

    from npbert.loading.checkpoint import float32_trouble

    weights = npbert.load_weights(DATA / name)
    assert float32_trouble(weights) is None
    arrays = {key: np.full_like(getattr(weights, key), value) for key, value in change.items()}
    assert "hold values up to" in float32_trouble(dataclasses.replace(weights, **arrays))


def test_ctrl_c_ignored_by_the_parent_stays_ignored_and_main_runs_in_a_thread(capsys):
    import signal
    import threading

    argv = ["embed", "x", "--model", str(TINY)]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as sh leaves a job run with &
    try:
        assert main(argv) == 0 and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert main(argv) == 0 and signal.getsignal(signal.SIGINT) is previous
    codes = []  # signals can be set only in the main thread: main() elsewhere sets none
    worker = threading.Thread(target=lambda: codes.append(main(argv)))
    worker.start()
    worker.join(60)
    assert codes == [0]


def test_explain_elides_rows_only_where_it_hides_two_or_more(capsys):
    """13 tokens: the 13th row is shown, not one '...' in place of one row (the [SEP] between
    a pair's segments, say); 14 hide two."""
    for words, elided in ((11, False), (12, True)):  # + [CLS] and [SEP]: 13 and 14 tokens
        assert main(["explain", " ".join(["a"] * words), "--model", str(TINY)]) == 0
        assert ("\n   ...\n" in capsys.readouterr().out) == elided, words  # a line of its own


@pytest.mark.parametrize(
    "code, ray_loaded, exits",
    [(130, True, True), (143, True, True), (0, True, True), (1, True, True), (0, False, False),
     (130, False, False)],
)  # fmt: skip
def test_a_ray_run_ends_without_the_interpreters_teardown(monkeypatch, code, ray_loaded, exits):
    """Ray's core worker outlives ray.shutdown, and crashed the process as it ended (exit 139
    after 'npbert: interrupted'; -11 after a completed run): the entry point runs the exit
    handlers and ends the process at once, with the command's code, whatever the outcome."""
    import npbert.__main__ as entry

    ended = fake_exit(monkeypatch, ray_loaded)
    monkeypatch.setattr(entry, "command", lambda: code)
    assert entry.main() == code
    assert ended == ([code] if exits else [])


def test_a_ray_run_started_with_standard_error_closed_ends_with_its_code(monkeypatch):
    """2>&-: flushing a stream that is None raised, and a completed run exited 1."""

    from npbert.cli.errors import finish

    ended = fake_exit(monkeypatch, ray_loaded=True)
    monkeypatch.setattr(sys, "stderr", None)
    assert finish(0) == 0 and ended == [0]


def test_python_m_npbert_cli_ends_a_ray_run_as_the_command_does(monkeypatch, capsys):
    """The tests and the bench run the CLI as `python -m npbert.cli`: a completed Ray run
    crashed as it ended there (exit -11), past npbert.__main__'s ending."""
    import runpy

    ended = fake_exit(monkeypatch, ray_loaded=True)
    monkeypatch.setattr(sys, "argv", ["npbert", "inspect", str(TINY)])
    monkeypatch.delitem(sys.modules, "npbert.cli.__main__", raising=False)  # as `python -m`
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("npbert.cli", run_name="__main__")
    assert exited.value.code == 0 and ended == [0], capsys.readouterr()


def fake_exit(monkeypatch, ray_loaded: bool) -> list:
    """os._exit recorded, not run; Ray loaded or not: the codes os._exit was called with."""
    import types

    ended = []
    monkeypatch.setattr(os, "_exit", ended.append)
    if ray_loaded:
        monkeypatch.setitem(sys.modules, "ray._raylet", types.ModuleType("ray._raylet"))
    else:
        monkeypatch.delitem(sys.modules, "ray._raylet", raising=False)
    return ended


def test_an_ids_file_with_more_data_than_its_header_says_is_refused(tmp_path, capsys):
    """A header of the wrong shape: the ids past it were dropped without a word."""
    np.save(tmp_path / "ids.npy", np.array([[2, 7, 3], [2, 8, 3]]))
    path = tmp_path / "ids.npy"
    path.write_bytes(path.read_bytes() + np.array([5], np.int64).tobytes())  # 8 bytes more
    code, _, err = run(capsys, "embed", "--ids-file", path, "--model", TINY)
    assert code == 2 and "array of 48 bytes, but 56 bytes follow the header" in err, err


def test_an_ids_file_whose_header_has_a_negative_length_is_refused_as_such(tmp_path, capsys):
    """It was refused as "an array of -8 bytes"."""
    path = tmp_path / "ids.npy"
    with path.open("wb") as file:
        header = {"descr": "<i8", "fortran_order": False, "shape": (-1,)}
        np.lib.format.write_array_header_1_0(file, header)
        file.write(np.array([5], np.int64).tobytes())
    code, _, err = run(capsys, "embed", "--ids-file", path, "--model", TINY)
    assert code == 2 and err.endswith("header's shape (-1,) has a negative length: not an array\n")


def test_compare_without_a_candidate_asks_for_it_alone(capsys):
    """TEXT was said to be required too, where --ids-file may stand for it."""
    with pytest.raises(SystemExit) as ended:
        main(["compare", "--model", str(TINY), "--ids-file", "ids.npy"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "the following arguments are required: CANDIDATE (see" in err


def test_an_argument_a_command_does_not_take_points_to_its_own_help(capsys):
    """An argument a command does not take pointed to npbert --help, which lists none."""
    with pytest.raises(SystemExit) as ended:
        main(["positions", "b", "--model", str(TINY)])
    err = capsys.readouterr().err
    assert ended.value.code == 2
    assert (
        err == "npbert positions: error: unrecognized arguments: b (see npbert positions --help)\n"
    )
    with pytest.raises(SystemExit):
        main(["inspect", str(TINY), "extra"])
    assert "(see npbert inspect --help)" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["embed"], ["explain"], ["compare", "c.npy"]])
def test_a_text_that_starts_with_a_dash_points_to_the_double_dash(capsys, command):
    with pytest.raises(SystemExit) as ended:
        main([*command, "-able", "--model", str(TINY)])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1
    assert "unrecognized arguments: -able (see" in err
    code, _, _ = run(capsys, "embed", "--model", TINY, "--", "-able")  # where such a text goes
    assert code == 0


def test_position_ids_from_a_file_go_to_embed_and_compare(tmp_path, capsys):
    """A port called with explicit positions (transformers' position_ids=) could be checked
    only from Python: its own position_ids were reported as differing from 0..L-1."""
    np.save(tmp_path / "ids.npy", np.array([[2, 7, 5, 3]]))
    np.save(tmp_path / "pos.npy", np.array([3, 4, 5, 6]))  # (L,): every sequence's
    files = ["--ids-file", tmp_path / "ids.npy", "--position-ids-file", tmp_path / "pos.npy"]
    code, _, _ = run(capsys, "embed", *files, "--model", TINY, "--out", tmp_path / "e.npz")
    saved = np.load(tmp_path / "e.npz")
    weights = npbert.load_weights(TINY)
    expected = npbert.embed(weights, saved["input_ids"], position_ids=np.array([3, 4, 5, 6]))
    assert code == 0 and np.array_equal(saved["embeddings"], expected)
    assert np.array_equal(saved["position_ids"], [3, 4, 5, 6])
    code, out, _ = run(capsys, "compare", tmp_path / "e.npz", *files, "--model", TINY)
    assert code == 0 and "PASS" in out
    code, out, _ = run(capsys, "compare", tmp_path / "e.npz", *files[:2], "--model", TINY)
    assert code == 1 and "no --position-ids-file given" in out
    np.save(tmp_path / "pos.npy", np.array([0, 1, 2, 600]))
    code, _, err = run(capsys, "embed", *files, "--model", TINY)
    assert code == 2 and f"--position-ids-file {tmp_path / 'pos.npy'}: position_ids[3] = 600" in err
    code, _, err = run(capsys, "embed", "a", "--position-ids-file", tmp_path / "pos.npy",
                       "--model", TINY)  # fmt: skip
    assert code == 2 and "--position-ids-file goes with --ids-file" in err


@pytest.mark.parametrize(
    "option", ["--token-type-ids-file", "--position-ids-file", "--attention-mask-file", "--pair"]
)
def test_input_refuses_the_options_of_texts_and_ids(tmp_path, capsys, option):
    """--position-ids-file (and the token type and mask files) with --input were ignored
    without a word, even naming no file: the corpus form's parser has no such option."""
    (tmp_path / "c.txt").write_text("a b\n")
    argv = ["embed", "--input", tmp_path / "c.txt", "--out", tmp_path / "o", "--model", TINY]
    with pytest.raises(SystemExit) as exit_info:
        main([*map(str, argv), option, str(tmp_path / "none.npy")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"unrecognized arguments: {option} " in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("extra", "option"),
    [(["--dtype", "float16"], "--dtype"), (["--workers", "5"], "--workers"),
     (["--engine", "ray"], "--engine"), (["--resume"], "--resume"), (["--quiet"], "--quiet")],
)  # fmt: skip
def test_texts_refuse_the_options_of_a_corpus(capsys, extra, option):
    """Given without --input they did nothing: each was refused by a rule of its own."""
    with pytest.raises(SystemExit) as exit_info:
        main(["embed", "x", "--model", str(TINY), *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"unrecognized arguments: {' '.join(extra)} (see npbert embed --help)" in err


def test_address_is_for_the_ray_engine(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("a b\n")
    argv = ["--input", tmp_path / "c.txt", "--out", tmp_path / "o", "--address", "h:1"]
    code, _, err = run(capsys, "embed", *argv, "--model", TINY)
    assert (code, err) == (
        2,
        "npbert: error: --address h:1 is for a Ray cluster: add --engine ray\n",
    )
    assert not (tmp_path / "o").exists()


def test_the_quote_hint_is_for_words_not_options(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "a", "--nonesuch", "x", "--model", str(TINY)])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --nonesuch x (see npbert explain --help)" in err, err


def test_explain_prints_huge_values_in_e_notation():
    """A float32 of 3e38 (a broken table's) took 45 digits of fixed point."""
    from npbert.analysis.explain import format_row

    row = format_row(np.array([3e38, -2e4, 1.5, np.nan, 9999.5], np.float32))
    assert row == "[3.000e+38 -2.000e+04  1.5000     nan 9999.5000]"


def test_explain_shows_the_mask_that_zeroes_rows_and_elides_long_id_tables(tmp_path, capsys):
    """DeBERTa's output rows of padding came out zero with no mask in sight, and a text of 512
    tokens printed 512 lines of ids where every stage shows 12 rows."""
    np.save(tmp_path / "ids.npy", np.array([2, 40, 41, 3, 0]))
    np.save(tmp_path / "mask.npy", np.array([1, 1, 1, 1, 0]))
    argv = ["explain", "--ids-file", tmp_path / "ids.npy", "--attention-mask-file"]
    code, out, _ = run(capsys, *argv, tmp_path / "mask.npy", "--model", DATA / "tiny-deberta")
    assert code == 0 and "attention_mask\n" in out and re.search(r"\n +4 +0 .* 0\n", out)
    code, out, _ = run(capsys, *argv, tmp_path / "mask.npy", "--model", TINY)
    assert code == 0 and "attention_mask" not in out  # BERT's layer takes no mask
    np.save(tmp_path / "long.npy", np.arange(5, 65))
    code, out, _ = run(capsys, "explain", "--ids-file", tmp_path / "long.npy", "--model", TINY)
    ids = out.split("\n2. ")[0].splitlines()[6:]  # the table's rows, past its header
    assert code == 0 and len(ids) == 13 and ids[6] == "   ..."
    assert ids[-1].split()[:2] == ["59", "64"]


def test_explain_keeps_where_sentence_b_begins_in_a_long_pair(capsys):
    """The elision hid the [SEP] and the first token of sentence B: where the pair's token
    types change, which is what a pair's id table is for."""
    code, out, _ = run(capsys, "explain", "hello world", "--pair", "how are you", "--model", TINY)
    table = out.split("\n2. ")[0]
    assert code == 0 and "   ...\n" in table  # 20 tokens: elided
    assert re.search(r"\n +11 \[SEP\] +3 +0 +11\n +12 h +44 +1 +12\n", table), table


def test_explain_walks_through_ids_from_files(tmp_path, capsys):
    """RoFormer's tokenizer cannot run here, so explain, which took only a TEXT, could not
    walk through a RoFormer at all; a port's own ids could not be walked through either."""
    from npbert.analysis.explain import format_row

    np.save(tmp_path / "ids.npy", np.array([[2, 40, 41, 3]]))  # (1, L): one sequence
    np.save(tmp_path / "types.npy", np.array([[0, 0, 1, 1]]))
    np.save(tmp_path / "pos.npy", np.array([5, 6, 7, 8]))  # (L,)
    files = ["--ids-file", tmp_path / "ids.npy", "--token-type-ids-file", tmp_path / "types.npy"]
    roformer = DATA / "tiny-roformer"
    code, stdout, _ = run(
        capsys, "explain", "--ids-file", tmp_path / "ids.npy", "--model", roformer
    )
    weights = npbert.load_weights(roformer)
    assert code == 0 and "1. The ids (given without their tokens)" in stdout
    assert f"  1 40  {format_row(weights.word_embeddings[40])}" in stdout
    projected = npbert.embed_stages(weights, [2, 40, 41, 3], project=True)["projected"]
    assert f"  3 3   {format_row(projected[3])}" in stdout
    code, stdout, _ = run(capsys, "explain", *files, "--position-ids-file", tmp_path / "pos.npy",
                          "--model", TINY)  # fmt: skip
    assert code == 0 and "position_id" in stdout
    assert re.search(r"\n +2 +41 +1 +7\n", stdout), stdout  # i, input_id, type, position
    stages = npbert.embed_stages(
        npbert.load_weights(TINY), [2, 40, 41, 3], [0, 0, 1, 1], [5, 6, 7, 8]
    )
    assert f"  2 41  {format_row(stages['embeddings'][2])}" in stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ids-file", "two.npy"], "--ids-file two.npy: explain walks through one sequence, "
         "(L,) or (1, L) ids, not (2, 2)"),
        (["a", "--ids-file", "two.npy"], "give TEXT arguments or --ids-file, not both"),
        (["a", "--position-ids-file", "two.npy"], "--position-ids-file goes with --ids-file"),
        ([], "nothing to explain: give a TEXT or --ids-file"),
    ],
)  # fmt: skip
def test_explain_refuses_ids_it_cannot_walk_through(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "two.npy", np.array([[2, 40], [41, 3]]))
    code, stdout, err = run(capsys, "explain", *argv, "--model", TINY)
    assert code == 2 and err == f"npbert: error: {message}\n" and stdout == ""


def test_explain_refuses_a_batch_of_ids_before_it_looks_for_the_model(tmp_path, capsys):
    np.save(tmp_path / "two.npy", np.array([[2, 40], [41, 3]]))
    missing = tmp_path / "no-model"
    code, _, err = run(capsys, "explain", "--ids-file", tmp_path / "two.npy", "--model", missing)
    assert code == 2 and "explain walks through one sequence" in err, err


def test_describe_counts_one_token_type_in_the_singular():
    import dataclasses

    from npbert.cli.output import describe

    config = npbert.load_weights(TINY).config
    assert "2 token types, eps" in describe(config)
    one = dataclasses.replace(config, type_vocab_size=1)
    assert "1 token type, eps" in describe(one)  # was "1 token types"


@pytest.mark.parametrize("family", ["tiny-distilbert", "tiny-mpnet", "tiny-bert"])
def test_the_inputs_embed_writes_go_back_into_compare(tmp_path, capsys, family):
    """Token types are written only where the layer takes them: compare refuses them for a
    family with no token-type table, so a file written for one could not be checked."""
    model = str(DATA / family)
    code, _, _ = run(capsys, "embed", "a b", "--model", model, "--out", tmp_path / "e.npz")
    written = np.load(tmp_path / "e.npz")
    typed = npbert.load_weights(model).config.type_vocab_size > 0
    assert code == 0 and ("token_type_ids" in written) == typed
    files = []
    for name, option in (("input_ids", "--ids-file"), ("token_type_ids", "--token-type-ids-file"),
                         ("attention_mask", "--attention-mask-file")):  # fmt: skip
        if name in written:
            np.save(tmp_path / f"{name}.npy", written[name])
            files += [option, tmp_path / f"{name}.npy"]
    code, out, err = run(capsys, "compare", tmp_path / "e.npz", "--model", model, *files)
    assert code == 0 and "PASS" in out, err
