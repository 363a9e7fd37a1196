"""npbert compare and npbert vectors: catching the real bugs, and naming the stage."""

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, load_golden
from safetensors.numpy import load_file, save_file

import npbert
from npbert.cli import main
from npbert.verify.tolerances import STAGES, ulps


def stages_with_bug(
    weights,
    input_ids,
    token_type_ids,
    *,
    eps=None,
    ddof=0,
    one_pass=False,
    position_offset=0,
    drop_token_type=False,
    swap_gamma_beta=False,
    truncate=None,
):
    """Another implementation of the layer, in float32, with one of the classic mistakes."""
    if truncate is not None:
        input_ids, token_type_ids = input_ids[..., :truncate], token_type_ids[..., :truncate]
    eps = weights.config.layer_norm_eps if eps is None else eps
    word = weights.word_embeddings[input_ids]
    position = weights.position_embeddings[np.arange(input_ids.shape[-1]) + position_offset]
    token_type = weights.token_type_embeddings[token_type_ids]
    summed = word + position if drop_token_type else word + token_type + position
    mean = summed.mean(-1, keepdims=True)
    if one_pass:
        variance = (summed * summed).mean(-1, keepdims=True) - mean * mean
    else:
        variance = summed.var(-1, ddof=ddof, keepdims=True)
    normalized = (summed - mean) / np.sqrt(variance + np.float32(eps))
    gamma, beta = weights.layer_norm_weight, weights.layer_norm_bias
    if swap_gamma_beta:
        gamma, beta = beta, gamma
    stages = {
        "word": word,
        "position": position,
        "token_type": token_type,
        "sum": summed,
        "normalized": normalized,
        "embeddings": normalized * gamma + beta,
    }
    if drop_token_type:
        del stages["token_type"]  # an implementation without it has nothing to show
    return stages


def compare(capsys, candidate_path, model, input_ids, token_type_ids, tmp_path, *extra):
    np.save(tmp_path / "ids.npy", input_ids)
    np.save(tmp_path / "tt.npy", token_type_ids)
    code = main(
        [
            "compare",
            str(candidate_path),
            "--model",
            str(model),
            "--ids-file",
            str(tmp_path / "ids.npy"),
            "--token-type-ids-file",
            str(tmp_path / "tt.npy"),
            "--json",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.startswith("{") else None), err


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return npbert.load_weights(minilm_dir)


@pytest.mark.parametrize("golden", ["minilm_pair", "minilm_full_length", "minilm_padded_batch"])
def test_torch_float32_output_passes(tmp_path, capsys, minilm_dir, golden, record):
    arrays, _ = load_golden(golden)
    np.savez(tmp_path / "torch.npz", **{k: arrays[k] for k in STAGES if k in arrays})
    code, report, _ = compare(
        capsys,
        tmp_path / "torch.npz",
        minilm_dir,
        arrays["input_ids"],
        arrays["token_type_ids"],
        tmp_path,
    )
    assert code == 0 and report["ok"] and report["first_disagreeing_stage"] is None
    bert_order = ["word", "token_type", "position", "sum", "normalized", "embeddings"]
    assert list(report["stages"]) == bert_order
    record(
        f"compare torch float32 ({golden}): max |diff| from float64 reference "
        f"{report['stages']['embeddings']['max_abs']:.3g}"
    )


BUGS = {
    "eps 1e-5 instead of 1e-12": ({"eps": 1e-5}, "normalized"),
    "unbiased (n-1) variance": ({"ddof": 1}, "normalized"),
    "positions shifted by one (RoBERTa offset)": ({"position_offset": 1}, "position"),
    "token type embedding left out": ({"drop_token_type": True}, "sum"),
    "gamma and beta swapped": ({"swap_gamma_beta": True}, "embeddings"),
}


@pytest.mark.parametrize("bug", BUGS)
def test_each_classic_bug_fails_at_the_right_stage(tmp_path, capsys, minilm, minilm_dir, bug):
    arrays, _ = load_golden("minilm_pair")
    ids, types = arrays["input_ids"][None], arrays["token_type_ids"][None]
    kwargs, stage = BUGS[bug]
    np.savez(tmp_path / "bug.npz", **stages_with_bug(minilm, ids, types, **kwargs))
    code, report, _ = compare(capsys, tmp_path / "bug.npz", minilm_dir, ids, types, tmp_path)
    assert code == 1 and report["first_disagreeing_stage"] == stage
    assert not report["ok"]


def test_output_only_candidate_still_fails(tmp_path, capsys, minilm, minilm_dir):
    arrays, _ = load_golden("minilm_pair")
    ids, types = arrays["input_ids"][None], arrays["token_type_ids"][None]
    np.save(tmp_path / "out.npy", stages_with_bug(minilm, ids, types, ddof=1)["embeddings"])
    code, report, _ = compare(capsys, tmp_path / "out.npy", minilm_dir, ids, types, tmp_path)
    assert code == 1 and report["first_disagreeing_stage"] == "embeddings"


def test_inputs_truncated_to_511_fail_at_the_first_stage(tmp_path, capsys, minilm, minilm_dir):
    arrays, _ = load_golden("minilm_full_length")
    ids, types = arrays["input_ids"][None], arrays["token_type_ids"][None]
    np.savez(tmp_path / "cut.npz", **stages_with_bug(minilm, ids, types, truncate=511))
    code, report, _ = compare(capsys, tmp_path / "cut.npz", minilm_dir, ids, types, tmp_path)
    assert code == 1 and report["first_disagreeing_stage"] == "word"
    assert report["stages"]["word"]["candidate_shape"] == [1, 511, 384]


@pytest.mark.slow
def test_one_pass_variance_fails_on_inputs_with_a_large_mean(tmp_path, capsys, minilm_dir):
    shifted = tmp_path / "shifted"
    shutil.copytree(minilm_dir, shifted, ignore=shutil.ignore_patterns("1_Pooling"))
    tensors = load_file(str(shifted / "model.safetensors"))
    # A mean of 2 against a spread of about 0.05: E[x^2] - E[x]^2 cancels away most of the
    # float32 digits, while two passes stay within 1e-5 (at a mean of 4 even a float32 sum
    # loses too much for 1e-5, whatever the variance formula).
    tensors["embeddings.word_embeddings.weight"] += np.float32(2.0)
    save_file(tensors, str(shifted / "model.safetensors"))
    weights = npbert.load_weights(shifted)
    arrays, _ = load_golden("minilm_pair")
    ids, types = arrays["input_ids"][None], arrays["token_type_ids"][None]
    np.savez(tmp_path / "bug.npz", **stages_with_bug(weights, ids, types, one_pass=True))
    code, report, _ = compare(capsys, tmp_path / "bug.npz", shifted, ids, types, tmp_path)
    assert code == 1 and report["first_disagreeing_stage"] == "normalized"
    np.savez(tmp_path / "npbert.npz", **npbert.embed_stages(weights, ids, types))
    code, report, _ = compare(capsys, tmp_path / "npbert.npz", shifted, ids, types, tmp_path)
    assert code == 0, report  # npbert's two-pass variance holds up on the same inputs


def test_candidate_formats_agree(tmp_path, capsys, minilm_dir):
    arrays, _ = load_golden("minilm_seed1")
    output = arrays["embeddings"]
    np.save(tmp_path / "c.npy", output)
    np.savez(tmp_path / "c.npz", embeddings=output)
    save_file({"embeddings": output}, str(tmp_path / "c.safetensors"))
    (tmp_path / "c.json").write_text(json.dumps({"embeddings": output.tolist()}))
    (tmp_path / "list.json").write_text(json.dumps(output.tolist()))
    # PowerShell's Set-Content -Encoding UTF8 begins a file with a byte order mark
    (tmp_path / "bom.json").write_text(json.dumps(output.tolist()), encoding="utf-8-sig")
    verdicts = set()
    for name in ("c.npy", "c.npz", "c.safetensors", "c.json", "list.json", "bom.json"):
        code, report, _ = compare(
            capsys,
            tmp_path / name,
            minilm_dir,
            arrays["input_ids"],
            arrays["token_type_ids"],
            tmp_path,
        )
        verdicts.add((code, report["stages"]["embeddings"]["max_abs"]))
    assert len(verdicts) == 1 and next(iter(verdicts))[0] == 0


def test_nan_in_the_candidate_fails(tmp_path, capsys, minilm_dir):
    arrays, _ = load_golden("minilm_seed1")
    output = arrays["embeddings"].copy()
    output[3, 7] = np.nan
    np.save(tmp_path / "nan.npy", output)
    code, report, _ = compare(
        capsys,
        tmp_path / "nan.npy",
        minilm_dir,
        arrays["input_ids"],
        arrays["token_type_ids"],
        tmp_path,
    )
    assert code == 1 and report["stages"]["embeddings"]["worst"]["index"] == [3, 7]
    # "max |diff| inf" alone: how many, and where the first is
    note = "1 of the candidate's values is NaN or infinite, the first at (3, 7): nan"
    assert note in report["stages"]["embeddings"]["notes"]


def test_text_report_states_the_tolerance_and_the_stage(tmp_path, capsys, minilm, minilm_dir):
    ids = np.array([[101, 1045, 2572, 8254, 2319, 102]])
    np.savez(
        tmp_path / "bug.npz", **stages_with_bug(minilm, ids, np.zeros_like(ids), position_offset=1)
    )
    code = main(["compare", str(tmp_path / "bug.npz"), "--model", str(minilm_dir), "I am Sinan"])
    out = capsys.readouterr().out
    assert code == 1
    assert "tolerance: atol 1e-05 (or 4 float32 steps of a stage's largest value), rtol 0" in out
    assert "FAIL: the first stage that disagrees is 'position'" in out
    assert "token cosine" in out and "ULPs" in out


def test_a_wrong_output_given_alone_names_no_step(tmp_path, capsys, minilm, minilm_dir):
    # "the first stage that disagrees is 'embeddings'" read as: the lookups are right
    ids = np.array([[101, 1045, 2572, 8254, 2319, 102]])
    stages = stages_with_bug(minilm, ids, np.zeros_like(ids), position_offset=1)
    np.save(tmp_path / "bug.npy", stages["embeddings"])
    code = main(["compare", str(tmp_path / "bug.npy"), "--model", str(minilm_dir), "I am Sinan"])
    out = capsys.readouterr().out.rstrip()
    assert code == 1 and "the first stage that disagrees" not in out
    assert out.endswith(
        "FAIL: 'embeddings' is the first stage given that disagrees; word, token_type, position, "
        "sum, normalized were not checked, and the fault may be there: give them too (an .npz "
        "of every stage, named as embed_stages names them) to find it"
    )


@pytest.mark.parametrize(
    "given, verdict",
    [
        # the lookups not given: the bug (in the positions) may be in any of them
        (("normalized", "embeddings"), "'normalized' is the first stage given that disagrees; "
         "word, token_type, position, sum were not checked"),
        (("word", "token_type", "sum", "embeddings"), "'sum' is the first stage given that "
         "disagrees; "
         "position was not checked"),
        # every lookup given: the one at fault is named
        (("word", "token_type", "position", "embeddings"),
         "the first stage that disagrees is 'position'"),
        # a lookup depends on no other stage: those not given are not where its fault is
        (("position", "embeddings"), "the first stage that disagrees is 'position'"),
    ],
)  # fmt: skip
def test_a_stage_not_given_before_the_first_that_disagrees_is_named(
    given, verdict, tmp_path, capsys, minilm, minilm_dir
):
    ids = np.array([[101, 1045, 2572, 8254, 2319, 102]])
    stages = stages_with_bug(minilm, ids, np.zeros_like(ids), position_offset=1)
    np.savez(tmp_path / "bug.npz", **{name: stages[name] for name in given})
    code = main(["compare", str(tmp_path / "bug.npz"), "--model", str(minilm_dir), "I am Sinan"])
    assert code == 1 and verdict in capsys.readouterr().out


def test_an_output_after_one_that_agrees_is_where_the_fault_is(tmp_path, capsys):
    """ALBERT's embeddings and projected, as `npbert embed --project --out` writes them: the
    projection's bias left out fails 'projected', and the layer's output vouches for the
    stages before it."""
    albert = str(TINY.parent / "tiny-albert")
    main(["embed", "a b", "--model", albert, "--project", "--out", str(tmp_path / "a.npz")])
    weights = npbert.load_weights(albert)
    arrays = dict(np.load(tmp_path / "a.npz"))
    arrays["projected"] = arrays["projected"] - weights.projection_bias  # the bias left out
    np.savez(tmp_path / "a.npz", **arrays)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a.npz"), "--model", albert, "a b"]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith("FAIL: the first stage that disagrees is 'projected'"), out


@pytest.mark.parametrize("row", ["padding", "real"])
def test_a_stage_wrong_only_in_padding_rows_says_so(tmp_path, capsys, row):
    # A C port that leaves padding rows at zero is right where a model looks; it said FAIL only
    embedder = npbert.Embedder.from_pretrained(TINY)
    texts = ["i am", "i am sinan and this is a test"]
    output = embedder(texts).embeddings.copy()  # (2, L, 32): the first row padded
    output[0, -1 if row == "padding" else 1] = 0.0
    np.save(tmp_path / "c.npy", output)
    code = main(["compare", str(tmp_path / "c.npy"), "--model", str(TINY), *texts])
    out = capsys.readouterr().out
    assert code == 1
    assert ("every value out of tolerance is in a padding row" in out) == (row == "padding")


def test_an_output_padded_to_a_fixed_length_is_named_so(tmp_path, capsys, minilm_dir):
    # A port that follows tokenizer.json's padding (all-MiniLM-L6-v2's: to 128) got SHAPE alone
    weights = npbert.load_weights(minilm_dir)
    ids = np.zeros((1, 128), np.int64)
    ids[0, :6] = [101, 1045, 2572, 8254, 2319, 102]
    mask = (np.arange(128) < 6)[None].astype(np.int64)
    np.save(tmp_path / "c.npy", npbert.embed(weights, ids, attention_mask=mask))
    code = main(["compare", str(tmp_path / "c.npy"), "--model", str(minilm_dir), "I am Sinan"])
    out = capsys.readouterr().out
    assert code == 1 and "SHAPE  candidate (1, 128, 384), expected (1, 6, 384)" in out
    assert "note:  128 tokens a sequence where the reference has 6: padded to a fixed" in out


@pytest.mark.parametrize("given", [False, True])
def test_a_defaulted_token_type_input_says_so_where_it_differs(tmp_path, capsys, given):
    # A pair's right token types in the candidate, and --token-type-ids-file forgotten
    argv = ["embed", "i am", "--pair", "a b", "--model", str(TINY), "--stages"]
    main([*argv, "--out", str(tmp_path / "s.npz")])
    capsys.readouterr()
    stages = dict(np.load(tmp_path / "s.npz"))
    np.save(tmp_path / "ids.npy", stages["input_ids"])
    np.save(tmp_path / "types.npy", np.zeros_like(stages["token_type_ids"]))
    types = ["--token-type-ids-file", str(tmp_path / "types.npy")] if given else []
    argv = ["compare", str(tmp_path / "s.npz"), "--model", str(TINY)]
    assert main([*argv, "--ids-file", str(tmp_path / "ids.npy"), *types]) == 1
    out = capsys.readouterr().out
    assert "  token_type_ids FAIL   3 of 7 differ; the first at (0, 4): 1 vs 0" in out
    note = "note:  the reference's are the default, all 0: no --token-type-ids-file given"
    assert (note in out) == (not given)


def test_a_roberta_port_numbering_positions_from_0_is_told_so_and_warned_when_it_gives_them(
    tmp_path, capsys
):
    """RoBERTa counts positions from padding_idx + 1. A port that counts from 0 fails on its
    own position_ids; given them as --position-ids-file, it would pass: a warning says so."""
    roberta = str(TINY.parent / "tiny-roberta")
    ids = np.array([[0, 57, 75, 2]])
    weights = npbert.load_weights(roberta)
    wrong = np.arange(4)[None]
    stages = npbert.embed_stages(weights, ids, position_ids=wrong, project=True)
    np.savez(tmp_path / "c.npz", **stages, input_ids=ids, position_ids=wrong)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "pos.npy", wrong)
    argv = ["compare", str(tmp_path / "c.npz"), "--model", roberta, "--ids-file"]
    assert main([*argv, str(tmp_path / "ids.npy")]) == 1
    out = capsys.readouterr().out
    assert "the reference's are the family's own, as its model makes them" in out
    assert (
        main([*argv, str(tmp_path / "ids.npy"), "--position-ids-file", str(tmp_path / "pos.npy")])
        == 0
    )
    err = capsys.readouterr().err
    assert "--position-ids-file holds positions other than those roberta makes" in err
    assert "(4 of 4 differ; the first at (0, 0): 0 vs 2)" in err and err.count("\n") == 1
    np.save(tmp_path / "pos.npy", np.arange(2, 6))  # roberta's own: no warning
    main([*argv, str(tmp_path / "ids.npy"), "--position-ids-file", str(tmp_path / "pos.npy")])
    assert "warning" not in capsys.readouterr().err
    np.save(tmp_path / "padded.npy", np.array([[0, 57, 2, 1]]))  # the pad id, 1, last
    np.save(tmp_path / "pos.npy", np.array([2, 3, 4, 0]))  # roberta's but at the padding
    argv = ["embed", "--model", roberta, "--ids-file", str(tmp_path / "padded.npy")]
    main([*argv, "--position-ids-file", str(tmp_path / "pos.npy")])
    assert "warning" not in capsys.readouterr().err


def test_a_pairs_stages_checked_without_its_token_types_say_what_the_reference_took(
    tmp_path, capsys
):
    """A pair's right stages, without its token_type_ids and with --token-type-ids-file
    forgotten: token_type fails, and the note says the reference took all 0."""
    argv = ["embed", "i am", "--pair", "a b", "--model", str(TINY), "--stages"]
    main([*argv, "--out", str(tmp_path / "s.npz")])
    capsys.readouterr()
    stages = dict(np.load(tmp_path / "s.npz"))
    np.save(tmp_path / "ids.npy", stages.pop("input_ids"))
    np.save(tmp_path / "types.npy", stages.pop("token_type_ids"))
    np.savez(tmp_path / "c.npz", **stages)
    argv = ["compare", str(tmp_path / "c.npz"), "--model", str(TINY), "--ids-file"]
    assert main([*argv, str(tmp_path / "ids.npy")]) == 1
    out = capsys.readouterr().out
    assert "token_type     FAIL" in out
    assert "note:  the reference's are the default, all 0: no --token-type-ids-file given" in out
    types = ["--token-type-ids-file", str(tmp_path / "types.npy")]
    assert main([*argv, str(tmp_path / "ids.npy"), *types]) == 0
    from npbert.verify.candidates import to_bfloat16

    stages["token_type"] = to_bfloat16(stages["token_type"]).astype(np.float32)
    np.savez(tmp_path / "c.npz", **stages)  # the right rows, stored in bfloat16
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "ids.npy")]) == 1
    assert "no --token-type-ids-file given" in capsys.readouterr().out
    stages["token_type"] = stages["token_type"] + np.float32(0.01)  # no table's rows: other
    np.savez(tmp_path / "c.npz", **stages)  # than the token types, wrong
    assert main([*argv, str(tmp_path / "ids.npy")]) == 1
    assert "no --token-type-ids-file given" not in capsys.readouterr().out


def test_a_deberta_output_without_its_projection_inside_the_layer_says_so(tmp_path, capsys):
    """DeBERTa projects E -> H before its LayerNorm: a port that leaves embed_proj out gives
    (B, L, E), which the note names, as it names ALBERT's projection after the layer."""
    deberta = str(TINY.parent / "tiny-deberta-v2")
    weights = npbert.load_weights(deberta)
    ids = np.array([[1, 7, 5, 2]])
    stages = npbert.embed_stages(weights, ids)
    x = stages["word"]  # (1, 4, E), no positions or token types in this checkpoint's sum
    centered = x - x.mean(-1, keepdims=True)
    output = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-7)
    np.save(tmp_path / "ids.npy", ids)
    for given, noted in ((output, True), (stages["embeddings"][..., :8], False)):
        np.save(tmp_path / "c.npy", given)
        argv = ["compare", str(tmp_path / "c.npy"), "--model", deberta]
        assert main([*argv, "--ids-file", str(tmp_path / "ids.npy")]) == 1
        out = capsys.readouterr().out
        assert ("the width of the word rows, before the projection inside" in out) == noted, out


def test_a_batch_as_long_as_its_sequences_given_with_its_axes_swapped_says_so(tmp_path, capsys):
    """(B, L, E) with B = L: the shape cannot tell the axes swapped, the values can."""
    ids = np.array([[2, 57, 3], [2, 75, 3], [2, 64, 3]])
    output = npbert.embed(npbert.load_weights(TINY), ids)
    np.save(tmp_path / "ids.npy", ids)
    swapped = output.swapaxes(0, 1)
    cases = ((swapped, True), (swapped.astype(np.float16), True), (output[::-1], False))
    for given, noted in cases:
        np.save(tmp_path / "c.npy", np.ascontiguousarray(given))
        argv = ["compare", str(tmp_path / "c.npy"), "--model", str(TINY)]
        assert main([*argv, "--ids-file", str(tmp_path / "ids.npy")]) == 1
        out = capsys.readouterr().out
        assert ("values with the batch and sequence axes swapped" in out) == noted, out


@pytest.mark.parametrize("name", ["c.npz", "c.json"])
def test_a_candidate_of_huge_values_fails_without_numpys_warnings(tmp_path, capsys, name):
    """Values past float32's range (1e39, in JSON) or near float64's (1e308: a port's
    uninitialized memory) overflow in the notes' guesses: they fail, with no warning."""
    huge = {"embeddings": np.full((1, 4, 32), 1e308), "position": np.full((4, 32), 1e308)}
    if name == "c.json":
        (tmp_path / name).write_text(json.dumps({"embeddings": np.full((1, 4, 32), 1e39).tolist()}))
    else:
        np.savez(tmp_path / name, **huge)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["compare", str(tmp_path / name), "--model", str(TINY), "a b"]) == 1
    out, err = capsys.readouterr()
    assert not caught and "Warning" not in err, [str(w.message) for w in caught] + [err]
    assert "as token ids are" not in out  # 1e308s are no ids


def test_the_default_tolerance_passes_float32_rounding_of_large_outputs(tmp_path, capsys):
    """gamma 300: outputs of several hundred, where one float32 step is 3e-5 to 6e-5. The float64
    reference rounded to float32, the best any float32 result can be, failed atol 1e-5."""
    from test_cli import tiny_words

    model = tiny_words(tmp_path, 300.0, tensor="LayerNorm.gamma")
    ids = np.array([[2, 5, 9, 14, 7, 3]])
    np.save(tmp_path / "ids.npy", ids)
    best = npbert.embed(npbert.load_weights(model), ids, dtype=np.float64).astype(np.float32)
    assert np.abs(best).max() > 200
    np.save(tmp_path / "best.npy", best)
    argv = ["compare", str(tmp_path / "best.npy"), "--model", str(model)]
    argv += ["--ids-file", str(tmp_path / "ids.npy")]
    assert main(argv) == 0
    assert "; held to atol 0.000" in capsys.readouterr().out
    assert main([*argv, "--atol", "1e-5"]) == 1  # as given
    np.save(tmp_path / "off.npy", best + 5e-3)  # past 4 steps: still a failure
    assert main(["compare", str(tmp_path / "off.npy"), *argv[2:]]) == 1


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("c.txt", b"1 2 3", "use .npy, .npz, .safetensors or .json"),
        ("c.npy", "missing", "c.npy: no such file"),
        ("c.json", b'{"embeddings": [["0.3", "0.1"]]}', "'embeddings' is not a numeric array"),
        ("c.json", b'{"embeddings": [[true, false]]}', "'embeddings' is not a numeric array"),
        ("c.npy", "directory", "c.npy is a directory: give a file"),
        ("c.npy", "fifo", "c.npy: not a regular file"),
        ("c.npz", None, "no 'embeddings' or 'projected' array"),
        ("c.json", b'{"embeddings": [["a"]]}', "'embeddings' is not a numeric array"),
        ("c.json", b"{oops", "cannot read it"),
        ("c.npy", b"garbage", "not a readable .npy array"),
        (
            "c.json",
            b'{"embeddings": [[1.0]], "normalised": [[1.0]]}',
            "'normalised' is not a stage",
        ),
    ],
)
def test_bad_candidates_exit_2(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    if content is None:
        np.savez(path, other=np.zeros(3))
    elif content == "directory":
        path.mkdir()
    elif content == "fifo":  # would be waited on for a writer
        os.mkfifo(path)
    elif content != "missing":
        path.write_bytes(content)
    code = main(["compare", str(path), "--model", str(TINY), "i am"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_ulp_distance_of_torch_and_npbert_from_the_float64_reference(minilm, record):
    outputs, references = {"torch": [], "npbert": []}, []
    for name in ("minilm_full_length", "minilm_padded_batch", "minilm_pair"):
        arrays, _ = load_golden(name)
        ids, types = arrays["input_ids"], arrays["token_type_ids"]
        references.append(npbert.embed(minilm, ids, types, dtype=np.float64).ravel())
        outputs["torch"].append(arrays["embeddings"].ravel())
        outputs["npbert"].append(npbert.embed(minilm, ids, types).ravel())
    reference = np.concatenate(references)
    medians, worst = {}, {}
    for who, output in outputs.items():
        output = np.concatenate(output)
        values = ulps(output, reference)
        medians[who], worst[who] = np.median(values), np.abs(output - reference).max()
        record(
            f"{who} float32 output, ULPs from the float64 reference: median "
            f"{medians[who]:.2f}, 99th percentile {np.percentile(values, 99):.1f}, "
            f"max {values.max():.0f}; max |diff| {worst[who]:.3g}"
        )
    # The largest error is one draw: on these three cases npbert's is a few % above torch's
    # (more or less with the BLAS kernel's dot product), on the bench's larger samples below.
    assert medians["npbert"] <= medians["torch"] and worst["npbert"] <= 1.2 * worst["torch"]


def test_vectors_are_complete_and_consistent(tmp_path, capsys):
    out = tmp_path / "vectors"
    assert main(["vectors", "--model", str(TINY), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (out / "FORMAT.md").is_file()
    assert set(manifest["cases"]) >= {
        "seed0",
        "seed1",
        "seed2",
        "pair",
        "padded_batch",
        "longest",
        "every_token_type",
        "repeated_tokens",
        "special_tokens",
    }
    digest = hashlib.sha256((TINY / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["weights_sha256"] == {"model.safetensors": digest}
    weights = npbert.load_weights(TINY)
    for case in manifest["cases"].values():
        for rel, info in case["files"].items():
            array = np.load(out / rel)
            assert list(array.shape) == info["shape"] and array.dtype.name == info["dtype"]
        folder = out / next(iter(case["files"])).split("/")[0]
        ids, types = np.load(folder / "input_ids.npy"), np.load(folder / "token_type_ids.npy")
        np.testing.assert_array_equal(
            np.load(folder / "embeddings.float64.npy"),
            npbert.embed(weights, ids, types, dtype=np.float64),
        )
    longest = np.load(out / "longest" / "input_ids.npy")
    assert longest.shape == (1, weights.config.max_position_embeddings)
    types = np.load(out / "every_token_type" / "token_type_ids.npy")
    assert set(types.ravel().tolist()) == set(range(weights.config.type_vocab_size))
    assert main(["vectors", "--model", str(TINY), "--out", str(out)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err
    assert main(["vectors", "--model", str(TINY), "--out", str(TINY / "config.json" / "v")]) == 2
    assert "config.json is a file, not a directory" in capsys.readouterr().err
    # the text encodes to more tokens than the case keeps
    assert manifest["cases"]["longest"]["description"].endswith("repeated and cut to that length")


def test_vectors_say_how_many_special_tokens_they_leave_out(monkeypatch):
    from npbert.verify import vectors

    monkeypatch.setattr(vectors, "SPECIAL", 2)
    case = vectors.cases(npbert.Embedder.from_pretrained(TINY))["special_tokens"]
    assert "(3 past the first 2 left out)" in case["description"]
    assert case["input_ids"].shape == (1, 2 + 2)  # and two pads


def test_vectors_float32_files_meet_the_atol_their_manifest_gives(tmp_path):
    """The manifest said atol 1e-5 for float32, and at gamma 300 its own float32 files were
    8e-5 to 1.6e-4 from the float64 ones: each float64 file now carries its own atol."""
    from test_cli import tiny_words

    model = tiny_words(tmp_path, 300.0, tensor="LayerNorm.gamma")
    assert main(["vectors", "--model", str(model), "--out", str(tmp_path / "v")]) == 0
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    raised = 0
    for case in manifest["cases"].values():
        for rel, info in case["files"].items():
            if not rel.endswith(".float64.npy"):
                continue
            reference = np.load(tmp_path / "v" / rel)
            ours = np.load(tmp_path / "v" / rel.replace(".float64.", ".float32."))
            assert np.abs(ours - reference).max() <= info["atol"]["float32"], rel
            assert info["atol"]["float64"] >= 1e-12
            raised += info["atol"]["float32"] > 1e-5
    assert raised  # the outputs of a few hundred


@pytest.fixture(scope="module")
def tiny_reference():
    """npbert's float64 output for 'i am' on tiny-bert, (1, 4, 32), and its ids."""
    weights = npbert.load_weights(TINY)
    ids = npbert.Embedder.from_pretrained(TINY).encode(["i am"]).input_ids
    return npbert.embed(weights, ids, dtype=np.float64), ids


def compare_text(capsys, candidate, *extra):
    code = main(["compare", str(candidate), "--model", str(TINY), "i am", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "reshape",
    [
        lambda x: np.concatenate([x, x]),  # (2, 4, 32): broadcasts against (1, 4, 32)
        lambda x: x[None],  # (1, 1, 4, 32)
        lambda x: x[:, :1],  # (1, 1, 32): broadcasts along the positions
        lambda x: x[:, :, None],  # (1, 4, 1, 32)
    ],
)
def test_shapes_that_merely_broadcast_fail(tmp_path, capsys, tiny_reference, reshape):
    reference, _ = tiny_reference
    candidate = reshape(reference)
    np.save(tmp_path / "c.npy", candidate)
    code, out, _ = compare_text(capsys, tmp_path / "c.npy", "--json")
    report = json.loads(out)
    assert code == 1 and report["first_disagreeing_stage"] == "embeddings"
    assert report["stages"]["embeddings"] == {
        "ok": False,
        "candidate_shape": list(candidate.shape),
        "expected_shape": [1, 4, 32],
    }


def test_a_large_candidate_of_the_wrong_shape_is_not_widened_to_be_told_so(tmp_path, capsys):
    """It was copied to float64 before its shape was looked at: a 1 GB .npy took 3.2 GB."""
    import tracemalloc  # NumPy reports its arrays' memory to it

    candidate = np.full((64, 4, 32 * 1024), 1.5, np.float32)  # 32 MiB, for (1, 4, 32)
    np.save(tmp_path / "c.npy", candidate)
    tracemalloc.start()
    try:
        code, out, _ = compare_text(capsys, tmp_path / "c.npy", "--json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 1 and json.loads(out)["stages"]["embeddings"]["ok"] is False
    assert peak < 1.5 * candidate.nbytes, f"{peak / candidate.nbytes:.2f}x the candidate"


def _refuse(constant):
    raise AssertionError(f"not standard JSON: {constant}")


def test_json_report_of_a_nan_candidate_is_standard_json(tmp_path, capsys, tiny_reference):
    candidate, _ = tiny_reference
    candidate = candidate.copy()
    candidate[0, 1, 2] = np.nan
    np.save(tmp_path / "c.npy", candidate)
    code, out, _ = compare_text(capsys, tmp_path / "c.npy", "--json")
    report = json.loads(out, parse_constant=_refuse)
    embeddings = report["stages"]["embeddings"]
    assert code == 1 and embeddings["ok"] is False
    assert embeddings["worst"]["candidate"] == "NaN", embeddings
    assert math.isinf(float(embeddings["max_abs"])), embeddings


def test_complex_candidates_are_refused(tmp_path, capsys, tiny_reference):
    reference, _ = tiny_reference
    np.save(tmp_path / "c.npy", reference + 0j)  # the real part is right
    code, _, err = compare_text(capsys, tmp_path / "c.npy")
    assert code == 2 and "c.npy: its array is complex" in err and err.count("\n") == 1
    np.savez(tmp_path / "c.npz", embeddings=reference, sum=reference.astype(np.complex64))
    code, _, err = compare_text(capsys, tmp_path / "c.npz")
    assert code == 2 and "'sum' is complex" in err


def test_the_report_says_when_a_batch_axis_of_1_was_added_or_dropped(
    tmp_path, capsys, tiny_reference
):
    reference, ids = tiny_reference
    np.save(tmp_path / "unbatched.npy", reference[0])  # (4, 32) for a (1, 4, 32) reference
    code, out, _ = compare_text(capsys, tmp_path / "unbatched.npy", "--json")
    assert code == 0 and json.loads(out)["stages"]["embeddings"]["batch_axis"] == "added"
    code, out, _ = compare_text(capsys, tmp_path / "unbatched.npy")
    assert "note:  the candidate has no batch axis; compared as a batch of one" in out
    np.save(tmp_path / "ids.npy", ids[0])  # (L,) ids: the reference is (4, 32)
    np.save(tmp_path / "batched.npy", reference)
    argv = ["compare", str(tmp_path / "batched.npy"), "--model", str(TINY)]
    code = main([*argv, "--ids-file", str(tmp_path / "ids.npy"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["stages"]["embeddings"]["batch_axis"] == "dropped"
    code, out, _ = compare_text(capsys, tmp_path / "batched.npy", "--json")
    assert code == 0 and json.loads(out)["stages"]["embeddings"]["batch_axis"] is None
    assert "batch axis" not in compare_text(capsys, tmp_path / "batched.npy")[1]


def crafted_header(claimed: int = 10**11, descr: str = "<f8") -> bytes:
    """The 145 bytes of an .npy whose header claims `claimed` elements (float64 unless
    `descr`)."""
    import io

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": (claimed,)}
    )
    return header.getvalue().ljust(145, b"\0")


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"1.0" + b"]" * depth


def raw_safetensors(path: Path, dtype: str, array: np.ndarray) -> None:
    """One tensor `embeddings` of `dtype` holding `array`'s bytes, as safetensors lays it out."""
    data = array.tobytes()
    header = {
        "embeddings": {"dtype": dtype, "shape": list(array.shape), "data_offsets": [0, len(data)]}
    }
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def test_a_bfloat16_candidate_is_widened_not_refused(tmp_path, capsys, minilm_dir):
    # A GPU implementation's usual output; NumPy has no bfloat16.
    arrays, _ = load_golden("minilm_seed1")
    bits = (arrays["embeddings"].view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16
    raw_safetensors(tmp_path / "c.safetensors", "BF16", bits)
    ids, types = arrays["input_ids"], arrays["token_type_ids"]
    code, report, _ = compare(capsys, tmp_path / "c.safetensors", minilm_dir, ids, types, tmp_path)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    reference = npbert.embed(npbert.load_weights(minilm_dir), ids, types, dtype=np.float64)
    assert code == 1  # bfloat16 keeps 8 bits: far outside 1e-5
    assert report["stages"]["embeddings"]["max_abs"] == pytest.approx(
        np.abs(widened - reference).max()
    )


def test_a_float8_candidate_is_refused_by_name(tmp_path, capsys):
    raw_safetensors(tmp_path / "c.safetensors", "F8_E4M3", np.zeros((1, 4, 32), np.uint8))
    code, _, err = compare_text(capsys, tmp_path / "c.safetensors")
    assert code == 2 and "'embeddings' is F8_E4M3, which npbert cannot read" in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32"])
def test_a_scalar_safetensors_candidate_is_named_a_scalar(tmp_path, capsys, dtype):
    size = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    raw_safetensors(tmp_path / "c.safetensors", dtype, np.zeros((), f"u{size}"))
    code, _, err = compare_text(capsys, tmp_path / "c.safetensors")
    assert code == 2 and "'embeddings' is a scalar, not an array" in err, err  # BF16 was
    assert err.count("\n") == 1  # "cannot read it (Cannot set flags on array scalars.)"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("c.npy", crafted_header(), "800,000,000,000 bytes, but only 17 bytes follow"),
        ("c.npy", crafted_header(descr="|V0"), "its dtype |V0 has no bytes per element"),
        ("c.npz", "crafted member", "embeddings.npy: its header describes a (100000000000,)"),
        ("c.json", deep_json(100_000), "cannot read it (maximum recursion depth"),
        ("c.json", b'{"embeddings": ' + deep_json(100_000) + b"}", "cannot read it"),
        ("c.json", b"[[" + b"9" * 400 + b"]]", "c.json: its array is not a numeric array"),
        ("c.json", b"[[" + b"9" * 5000 + b"]]", "cannot read it"),  # past Python's digit limit
        ("c.safetensors", b"\x10" + b"\0" * 7 + b"{}", "c.safetensors: the header claims 16"),
        # an empty archive
        ("c.npz", b"PK\x05\x06" + b"\0" * 18, "no 'embeddings' or 'projected' array"),
        ("c.npz", b"PK\x03\x04garbage", "not a readable .npz archive"),
    ],
)
def test_crafted_candidates_are_one_line_errors(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    if content == "crafted member":
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("embeddings.npy", crafted_header())
    else:
        path.write_bytes(content)
    code, _, err = compare_text(capsys, path)
    assert code == 2 and message in err and err.count("\n") == 1, err


def damaged_npz(path: Path, damage: str) -> None:
    """An .npz of one float32 array, damaged as an archive someone hands over can be."""
    import io
    import zipfile

    array = io.BytesIO()
    np.save(array, np.ones((1, 4, 32), np.float32))
    method = {"lzma": zipfile.ZIP_LZMA, "bzip2": zipfile.ZIP_BZIP2}.get(damage, 8)  # deflate
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        archive.writestr("embeddings.npy", array.getvalue())
    raw = bytearray(path.read_bytes())
    central = raw.rindex(b"PK\x01\x02")
    if damage == "encrypted":  # general purpose flag bit 0, in both headers
        raw[6] |= 1
        raw[central + 8] |= 1
    elif damage == "method-99":  # AES encryption's compression method
        raw[8:10] = raw[central + 10 : central + 12] = (99).to_bytes(2, "little")
    else:  # compressed bytes flipped
        data = 30 + len("embeddings.npy")
        raw[data + 8 : data + 24] = bytes(b ^ 0xFF for b in raw[data + 8 : data + 24])
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", ["encrypted", "method-99", "deflate", "lzma", "bzip2"])
def test_a_damaged_npz_candidate_is_a_one_line_error_not_a_failed_comparison(
    tmp_path, capsys, damage
):
    # Each raised out of zipfile or the decompressor: a traceback, exit 1 (the FAIL status)
    damaged_npz(tmp_path / "c.npz", damage)
    code, _, err = compare_text(capsys, tmp_path / "c.npz")
    assert code == 2 and f"candidate {tmp_path / 'c.npz'}" in err and err.count("\n") == 1, err


def test_token_cosine_of_two_zero_rows_is_one_and_of_one_zero_row_zero():
    from npbert.verify.tolerances import cosines

    zero, row = np.zeros(4), np.arange(1.0, 5.0)
    candidate = np.stack([zero, zero, row, row, np.full(4, np.nan)])
    reference = np.stack([zero, row, zero, 2 * row, zero])
    np.testing.assert_array_equal(cosines(candidate, reference)[:4], [1.0, 0.0, 0.0, 1.0])
    assert np.isnan(cosines(candidate, reference)[4])  # NaN stays the worst token, not 1


@pytest.fixture
def nan_checkpoint(tmp_path):
    """tiny-bert with a NaN in word row 13 ('i')."""
    shutil.copytree(TINY, tmp_path / "nan")
    tensors = load_file(str(TINY / "model.safetensors"))
    tensors["bert.embeddings.word_embeddings.weight"][13, 4] = np.nan
    save_file(tensors, str(tmp_path / "nan" / "model.safetensors"))
    return tmp_path / "nan"


def test_a_reference_with_nan_checks_nothing(tmp_path, capsys, nan_checkpoint):
    # A candidate that does what npbert does would otherwise FAIL, "nan vs nan", as if wrong.
    embedder = npbert.Embedder.from_pretrained(nan_checkpoint)
    np.save(tmp_path / "c.npy", embedder("i am").embeddings)
    code = main(["compare", str(tmp_path / "c.npy"), "i am", "--model", str(nan_checkpoint)])
    error = capsys.readouterr().err
    assert code == 2 and "float64 reference is not finite: word[0, 1, 4] = nan" in error
    code = main(["vectors", "--model", str(nan_checkpoint), "--out", str(tmp_path / "v")])
    error = capsys.readouterr().err
    assert code == 2 and "the checkpoint's word_embeddings holds NaN or Inf" in error, error
    assert not (tmp_path / "v").exists()


def test_explain_compares_nan_by_place(capsys, nan_checkpoint):
    assert main(["explain", "i am", "--model", str(nan_checkpoint)]) == 0
    out = capsys.readouterr().out
    assert "(equal within 1e-05)" in out and "MISMATCH" not in out
    assert "Note: 32 output values are NaN or infinite" in out  # the row of 'i', width 32


@pytest.fixture(scope="module")
def tiny_stages():
    """npbert's stages for 'i am' on tiny-bert, in float64 and float32: compare's references."""
    weights = npbert.load_weights(TINY)
    ids = npbert.Embedder.from_pretrained(TINY).encode(["i am"]).input_ids
    return [
        npbert.embed_stages(weights, ids, dtype=d, project=True) for d in (np.float64, np.float32)
    ]


def test_nan_never_passes_however_wide_the_tolerance(tiny_stages):
    from npbert.verify import compare as compare_stages

    reference64, reference32 = tiny_stages
    output = reference32["embeddings"].copy()
    output[(0,) * output.ndim] = np.nan
    for atol, rtol in ((1e300, 0), (0, 1e308), (1e300, 1e300)):
        report = compare_stages(
            {"embeddings": output}, reference64, reference32, atol=atol, rtol=rtol
        )
        assert not report["ok"]


@pytest.mark.parametrize(
    ("candidate", "options", "message"),
    [
        ({}, {}, r"no 'embeddings' or 'projected' \(it has \[\]\)"),
        ({"word": 0}, {}, r"no 'embeddings' or 'projected' \(it has \['word'\]\)"),
        ({"embeddings": [["a"]]}, {}, "'embeddings' is not a numeric array"),
        (None, {"atol": -1e-5}, "atol must be a finite number of at least 0, got -1e-05"),
        (None, {"rtol": 2**1024}, "rtol must be a finite number of at least 0, got 1797"),
        (None, {"rtol": float("nan")}, "rtol must be a finite number of at least 0, got nan"),
        (None, {"atol": "1e-5"}, "atol must be a finite number of at least 0, got '1e-5'"),
        (None, {"atol": True}, "atol must be a finite number of at least 0, got True"),
    ],
)
def test_compare_checks_what_it_is_given(tiny_stages, candidate, options, message):
    from npbert.verify import compare as compare_stages

    reference64, reference32 = tiny_stages
    candidate = {"embeddings": reference32["embeddings"]} if candidate is None else candidate
    with pytest.raises(npbert.InputError, match=message):
        compare_stages(candidate, reference64, reference32, **({"atol": 1e-5, "rtol": 0} | options))


@pytest.mark.parametrize(
    ("references", "message"),
    [  # each raised AttributeError, KeyError or IndexError, or passed (swapped references)
        (lambda r64, r32: (r64["embeddings"], r32), "reference64 must be embed_stages"),
        (lambda r64, r32: (None, r32), "with 'word' and 'embeddings'"),
        (lambda r64, r32: (r64, {}), "reference32 must be embed_stages"),
        (lambda r64, r32: (r64, r32["embeddings"]), "reference32 must be embed_stages"),
        (lambda r64, r32: ({"embeddings": r64["embeddings"]}, r32), "with 'word' and 'embed"),
        (lambda r64, r32: (r32, r64), "its 'word' is float32 (1, 4, 32), not float64"),
        (lambda r64, r32: (r64, {**r32, "word": r32["word"][:, :2]}), "stages or shapes differ"),
        (lambda r64, r32: (r64, {**r32, "word": None}), "its 'word' is NoneType, not float32"),
    ],
)
def test_compare_checks_its_references(tiny_stages, references, message):
    from npbert.verify import compare as compare_stages

    reference64, reference32 = references(*tiny_stages)
    candidate = {"embeddings": tiny_stages[1]["embeddings"]}
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        compare_stages(candidate, reference64, reference32)


def test_compare_says_where_projected_references_come_from():
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY.parent / "tiny-albert")
    ids = np.array([2, 7, 5, 3])
    references = [npbert.embed_stages(weights, ids, dtype=d) for d in (np.float64, np.float32)]
    projected = npbert.embed_stages(weights, ids, project=True)["projected"]
    with pytest.raises(npbert.InputError, match=re.escape("embed_stages(..., project=True)")):
        compare_stages({"projected": projected}, *references)


def test_compare_names_an_input_of_its_own_it_cannot_read(tiny_stages):
    from npbert.verify import compare as compare_stages

    ids = [[1, 2], [3]]  # ragged: raised NumPy's ValueError
    candidate = {"embeddings": tiny_stages[1]["embeddings"], "input_ids": np.zeros((2, 4), int)}
    with pytest.raises(npbert.InputError, match=r"inputs\['input_ids'\] is not an array of ids"):
        compare_stages(candidate, *tiny_stages, inputs={"input_ids": ids})


def test_shared_position_rows_are_checked_against_per_sequence_ones():
    # RoBERTa's reference positions are (B, L, E), from the padding; FORMAT.md lets an
    # implementation give (L, E) where every sequence's are alike.
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY.parent / "tiny-roberta")
    ids = np.array([[0, 261, 79, 79, 2], [0, 82, 224, 90, 2]])  # no padding: rows alike
    references = [npbert.embed_stages(weights, ids, dtype=d) for d in (np.float64, np.float32)]
    candidate = dict(references[1])
    assert candidate["position"].shape == (2, 5, weights.config.embedding_size)
    candidate["position"] = candidate["position"][0]  # (L, E)
    report = compare_stages(candidate, *references, atol=1e-5, rtol=0)
    assert report["ok"] and report["stages"]["position"]["ok"], report
    padded = np.array([[0, 261, 79, 79, 2], [0, 82, 2, 1, 1]])  # 1 pads: positions differ
    references = [npbert.embed_stages(weights, padded, dtype=d) for d in (np.float64, np.float32)]
    candidate = {**references[1], "position": references[1]["position"][0]}
    assert compare_stages(candidate, *references, atol=1e-5, rtol=0)["first_disagreeing_stage"] == (
        "position"
    )


@pytest.mark.parametrize("ids", [[[2, 7, 5, 3], [2, 9, 3, 0]], [2, 7, 5, 3]], ids=["B=2", "(L,)"])
def test_shared_positions_per_sequence_must_be_the_batchs(ids):
    """BERT's reference positions are (L, E), shared: a candidate may give them per sequence,
    but (7, L, E) for a batch of 2 (or for one sequence) passed as well."""
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY)
    references = [npbert.embed_stages(weights, ids, dtype=d) for d in (np.float64, np.float32)]
    rows = references[1]["position"]  # (L, E)
    batch = np.array(ids).shape[0] if np.ndim(ids) == 2 else 1
    given = {"embeddings": references[1]["embeddings"]}
    ok = compare_stages(
        {**given, "position": np.stack([rows] * batch)}, *references, atol=1e-5, rtol=0
    )
    assert ok["stages"]["position"]["ok"]
    wrong = {**given, "position": np.stack([rows] * 7)}
    report = compare_stages(wrong, *references, atol=1e-5, rtol=0)
    assert report["first_disagreeing_stage"] == "position"
    assert report["stages"]["position"]["candidate_shape"][0] == 7


def test_a_candidate_of_the_projected_output_alone_is_checked():
    # What the first encoder layer receives (ALBERT's projection to H): a port may stop there.
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY.parent / "tiny-albert")
    ids = np.array([[2, 7, 5, 3]])
    references = [
        npbert.embed_stages(weights, ids, dtype=d, project=True) for d in (np.float64, np.float32)
    ]
    projected = references[1]["projected"]
    report = compare_stages({"projected": projected}, *references, atol=1e-5, rtol=0)
    assert report["ok"] and list(report["stages"]) == ["projected"] and "projected" in report
    wrong = projected + np.float32(1e-3) * (np.arange(projected.shape[-1]) == 3)
    report = compare_stages({"projected": wrong}, *references, atol=1e-5, rtol=0)
    assert report["first_disagreeing_stage"] == "projected"
    assert report["stages"]["projected"]["worst"]["index"][-1] == 3


@pytest.mark.parametrize("family", ["albert", "electra", "roformer"])
def test_a_projection_without_its_bias_fails_on_the_test_checkpoints(family):
    # transformers initializes the bias to 0: the checkpoints randomize it (make_goldens.py),
    # or a port that leaves it out would pass against them and their vectors.
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY.parent / f"tiny-{family}")
    ids = np.array([[2, 7, 5, 3]])
    references = [
        npbert.embed_stages(weights, ids, dtype=d, project=True) for d in (np.float64, np.float32)
    ]
    unbiased = references[1]["embeddings"] @ weights.projection_weight.T  # (1, 4, H)
    report = compare_stages({"projected": unbiased}, *references, atol=None, rtol=0)
    assert report["first_disagreeing_stage"] == "projected"
    report = compare_stages(
        {"projected": unbiased + weights.projection_bias}, *references, atol=None, rtol=0
    )
    assert report["ok"]


def test_compare_takes_what_embed_stages_out_writes_as_load_candidate_does(tmp_path, capsys):
    from npbert.verify import compare as compare_stages

    out = tmp_path / "stages.npz"
    assert main(["embed", "i am", "--model", str(TINY), "--stages", "--out", str(out)]) == 0
    with np.load(out) as saved:
        candidate = {key: saved[key] for key in saved}  # metadata and the inputs too
    assert {"metadata", "input_ids", "attention_mask"} <= set(candidate)
    weights, ids = npbert.load_weights(TINY), candidate["input_ids"]
    references = [
        npbert.embed_stages(weights, ids, candidate["token_type_ids"], dtype=d, project=True)
        for d in (np.float64, np.float32)
    ]
    assert compare_stages(candidate, *references, atol=1e-5, rtol=0)["ok"]
    with pytest.raises(npbert.InputError, match="a dict of stage names"):
        compare_stages({**candidate, 1: candidate["embeddings"]}, *references, atol=0, rtol=0)


@pytest.mark.parametrize("value", [np.inf, np.nan, 1e200])
def test_a_candidates_inf_nan_or_overflow_fails_without_numpy_warnings(tiny_stages, value):
    import warnings

    from npbert.verify import compare as compare_stages

    reference64, reference32 = tiny_stages
    output = reference32["embeddings"].astype(np.float64)
    output[..., 0, :] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "invalid value encountered in divide", "overflow ..."
        report = compare_stages({"embeddings": output}, reference64, reference32, atol=1, rtol=0)
    assert not report["ok"] and report["embeddings"]["min_token_cosine"] < 0.5


def test_vectors_of_a_model_of_few_positions_cut_the_texts_and_say_so(tmp_path):
    """The example pair needs more positions than a small model has: it was refused with a
    hint to pass --truncate, which `vectors` does not take."""
    shutil.copytree(TINY, tmp_path / "m")
    config = json.loads((TINY / "config.json").read_text())
    config["max_position_embeddings"] = 20
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(TINY / "model.safetensors"))
    name = next(k for k in tensors if "position_embeddings" in k)
    tensors[name] = tensors[name][:20].copy()
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    assert main(["vectors", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "v")]) == 0
    cases = json.loads((tmp_path / "v" / "manifest.json").read_text())["cases"]
    assert cases["pair"]["description"].endswith(", cut to the model's 20 positions")
    assert "cut" not in cases["seed1"]["description"]
    ids = next(rel for rel in cases["pair"]["files"] if rel.endswith("input_ids.npy"))
    assert np.load(tmp_path / "v" / ids).shape == (1, 20)


def test_the_default_atol_grows_past_1e_5_from_outputs_of_32():
    from npbert.verify.tolerances import default_atol

    assert default_atol(np.array([-31.9, 1.0])) == 1e-5
    assert default_atol(np.array([1.0, -32.0])) == 4 * float(np.spacing(np.float32(32)))


# --- the candidate's inputs, and the notes that explain a result ----------------------------


def test_a_candidates_own_input_ids_are_checked_first(tmp_path, capsys):
    # A tokenizer's mistake ([SEP] where [CLS] goes) is named where it is, before the lookups.
    main(["embed", "i am", "--model", str(TINY), "--stages", "--out", str(tmp_path / "s.npz")])
    capsys.readouterr()
    stages = dict(np.load(tmp_path / "s.npz"))
    code, out, _ = compare_text(capsys, tmp_path / "s.npz")
    assert code == 0 and "  input_ids      ok     all 4 as the reference's" in out
    cls = stages["input_ids"][0, 0]
    stages["input_ids"] = stages["input_ids"].copy()
    stages["input_ids"][0, 0] = sep = stages["input_ids"][0, -1]
    np.savez(tmp_path / "bad.npz", **stages)
    code, out, _ = compare_text(capsys, tmp_path / "bad.npz")
    assert code == 1 and f"1 of 4 differ; the first at (0, 0): {sep} vs {cls}" in out
    assert out.rstrip().endswith("the first stage that disagrees is 'input_ids'")
    stages["input_ids"] = stages["input_ids"][:, :3]
    np.savez(tmp_path / "short.npz", **stages)
    code, out, _ = compare_text(capsys, tmp_path / "short.npz", "--json")
    assert json.loads(out)["inputs"]["input_ids"] == {
        "ok": False,
        "candidate_shape": [1, 3],
        "expected_shape": [1, 4],
        "first": {"index": [0, 0], "candidate": int(sep), "reference": int(cls)},
        "agree": 0,
    }  # a length from another tokenization: where the rows part, as for one length
    stages["input_ids"][0, 0] = cls  # now only [SEP] is missing
    np.savez(tmp_path / "short.npz", **stages)
    code, out, _ = compare_text(capsys, tmp_path / "short.npz")
    assert "SHAPE  candidate (1, 3), expected (1, 4); the first 3 of each row agree" in out


def test_inputs_are_checked_only_where_the_reference_has_them(tiny_stages):
    from npbert.verify import compare as compare_stages

    ids = np.array([[2, 13, 14, 3]])
    given = {"embeddings": tiny_stages[1]["embeddings"], "position_ids": np.arange(4)}
    report = compare_stages(given, *tiny_stages, atol=None, rtol=0)  # no inputs: none checked
    assert report["ok"] and report["inputs"] == {}
    inputs = {"input_ids": ids, "position_ids": np.arange(4)[None], "token_type_ids": None}
    report = compare_stages(given, *tiny_stages, atol=None, rtol=0, inputs=inputs)
    assert report["inputs"] == {"position_ids": {"ok": True, "differ": 0, "of": 4}}
    given["position_ids"] = np.arange(1, 5)  # (L,) against (1, L): broadcast, and wrong
    given["token_type_ids"] = np.ones(4)  # a family without the table: not checked
    report = compare_stages(given, *tiny_stages, atol=None, rtol=0, inputs=inputs)
    assert report["first_disagreeing_stage"] == "position_ids"
    assert list(report["inputs"]) == ["position_ids"]
    assert report["inputs"]["position_ids"]["first"] == {"index": [0, 0], "candidate": 1,
                                                         "reference": 0}  # fmt: skip


def tiny_albert_outputs(tmp_path, capsys) -> dict:
    main(["embed", "the quick fox", "--model", str(TINY.parent / "tiny-albert"), "--project",
          "--stages", "--out", str(tmp_path / "a.npz")])  # fmt: skip
    capsys.readouterr()
    return dict(np.load(tmp_path / "a.npz"))


def compare_albert(capsys, candidate, *extra):
    argv = ["compare", str(candidate), "--model", str(TINY.parent / "tiny-albert")]
    code = main([*argv, "the quick fox", *extra])
    return code, capsys.readouterr()[0]


def test_a_bare_output_checked_before_the_projection_says_so(tmp_path, capsys):
    # A port that leaves out ALBERT's projection, saving a .npy, is checked as the layer's
    # output, as the README says; the report says what that means.
    arrays = tiny_albert_outputs(tmp_path, capsys)
    np.save(tmp_path / "e.npy", arrays["embeddings"])
    code, out = compare_albert(capsys, tmp_path / "e.npy")
    assert code == 0 and "note:  checked as the layer's output, before the projection" in out
    np.savez(tmp_path / "e.npz", embeddings=arrays["embeddings"])
    assert "before the projection" not in compare_albert(capsys, tmp_path / "e.npz")[1]
    np.savez(tmp_path / "p.npz", projected=arrays["embeddings"])  # named, at the wrong width
    code, out = compare_albert(capsys, tmp_path / "p.npz")
    assert code == 1 and "shape of 'embeddings', the layer's output before the projection" in out


def test_position_rows_shared_where_the_reference_has_them_per_sequence_say_so(tmp_path, capsys):
    roberta = str(TINY.parent / "tiny-roberta")
    texts = ["the quick fox", "a"]  # padded: the second sequence's positions stop early
    main(["embed", *texts, "--model", roberta, "--stages", "--out", str(tmp_path / "r.npz")])
    capsys.readouterr()
    arrays = dict(np.load(tmp_path / "r.npz"))
    rows = arrays["position"][0]  # (L, E), the first sequence's
    table = npbert.load_weights(roberta).position_embeddings
    right, wrong = rows, table[: len(rows)]  # positions from 0: wrong
    cases = ((right, False), (right.astype(np.float16), False), (wrong, True))
    for shared, wrong in cases:
        np.savez(tmp_path / "shared.npz", **{**arrays, "position": shared})
        code = main(["compare", str(tmp_path / "shared.npz"), "--model", roberta, *texts])
        out = capsys.readouterr()[0]
        assert code == 1 and "position rows differ between sequences" in out
        assert ("these rows are no sequence's, so the positions are wrong too" in out) == wrong


def nearest_bfloat16(values: np.ndarray) -> np.ndarray:
    """values rounded to the nearer of the two bfloat16 numbers around them, in float64."""
    bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    low = bits.view(np.float32).astype(np.float64)  # toward zero
    high = (bits + np.uint32(0x10000)).view(np.float32).astype(np.float64)  # away from zero
    return np.where(np.abs(values - low) <= np.abs(high - values), low, high)


@pytest.mark.parametrize("narrow", ["float16", "bfloat16"])
def test_a_candidate_of_float16_or_bfloat16_numbers_is_told_what_rounding_alone_costs(
    tmp_path, capsys, minilm_dir, narrow
):
    embedder = npbert.Embedder.from_pretrained(minilm_dir)
    ids = embedder.encode(["i am sinan"]).input_ids
    output = npbert.embed(embedder.weights, ids)
    reference = npbert.embed(embedder.weights, ids, dtype=np.float64)
    if narrow == "float16":
        stored, rounded = output.astype(np.float16), reference.astype(np.float16)
    else:  # as a GPU's bfloat16 output, widened to float32
        stored, rounded = nearest_bfloat16(output).astype(np.float32), nearest_bfloat16(reference)
    np.save(tmp_path / "c.npy", stored)
    code = main(["compare", str(tmp_path / "c.npy"), "--model", str(minilm_dir), "i am sinan"])
    out = capsys.readouterr()[0]
    distance = np.abs(rounded - reference).max()
    said = f"diagnosis: matches the reference with the output rounded to {narrow}, which alone"
    assert code == 1 and f"{said} puts it {distance:.3g} from the reference" in out
    np.save(tmp_path / "c.npy", output + np.float32(1e-3))  # wrong, in float32: no note
    main(["compare", str(tmp_path / "c.npy"), "--model", str(minilm_dir), "i am sinan"])
    said = capsys.readouterr()[0]
    assert "number:" not in said and "diagnosis:" not in said


def test_ulps_leave_out_the_zero_rows_of_deberta_padding(tmp_path, capsys):
    deberta = str(TINY.parent / "tiny-deberta")
    texts = ["the quick brown fox", "a"]
    main(["embed", *texts, "--model", deberta, "--out", str(tmp_path / "d.npz")])
    capsys.readouterr()
    arrays = dict(np.load(tmp_path / "d.npz"))
    padding = arrays["attention_mask"] == 0
    assert padding.any() and (arrays["embeddings"][padding] == 0).all()
    arrays["embeddings"][padding] = 1e-8  # padding not quite zeroed
    np.savez(tmp_path / "d.npz", **arrays)
    code = main(["compare", str(tmp_path / "d.npz"), "--model", deberta, *texts, "--json"])
    summary = json.loads(capsys.readouterr()[0])["embeddings"]
    assert code == 0  # within atol
    assert summary["zero_reference_values"] == padding.sum() * arrays["embeddings"].shape[-1]
    assert summary["max_ulp_float32"] < 1e3  # not 1e37: the zeros are left out


def test_ids_with_deberta_padding_and_no_mask_get_a_warning(tmp_path, capsys):
    deberta, bert = (str(TINY.parent / f"tiny-{name}") for name in ("deberta", "bert"))
    pad = json.loads((TINY.parent / "tiny-deberta" / "config.json").read_text())["pad_token_id"]
    np.save(tmp_path / "ids.npy", np.array([[1, 7, 8, 2, pad]]))
    np.save(tmp_path / "mask.npy", np.array([[1, 1, 1, 1, 0]]))
    out = str(tmp_path / "o.npy")
    args = ["embed", "--ids-file", str(tmp_path / "ids.npy"), "--out", out, "--model"]
    assert main([*args, deberta]) == 0
    assert (
        f"holds the pad id {pad} (1 of 5 ids), and no --attention-mask-file"
        in (capsys.readouterr()[1])
    )
    assert main([*args, deberta, "--attention-mask-file", str(tmp_path / "mask.npy")]) == 0
    assert main([*args, bert]) == 0  # BERT does not zero padding: nothing to say
    assert "warning" not in capsys.readouterr()[1]


def test_the_mask_is_checked_only_where_the_layer_takes_it(tmp_path, capsys):
    # BERT's layer takes no mask: a padded batch's own mask against ids given without one is
    # no mistake. DeBERTa's zeroes padding: there it is checked, a bool mask read as 0 and 1.
    texts = ["the quick brown fox", "a"]
    for family, checked in (("bert", False), ("deberta", True)):
        model = str(TINY.parent / f"tiny-{family}")
        main(["embed", *texts, "--model", model, "--out", str(tmp_path / "c.npz")])
        capsys.readouterr()
        arrays = dict(np.load(tmp_path / "c.npz"))
        arrays["attention_mask"] = arrays["attention_mask"].astype(bool)
        np.savez(tmp_path / "c.npz", **arrays)
        np.save(tmp_path / "ids.npy", arrays["input_ids"])
        argv = ["compare", str(tmp_path / "c.npz"), "--model", model, "--json"]
        code = main([*argv, "--ids-file", str(tmp_path / "ids.npy")])
        report = json.loads(capsys.readouterr()[0])
        assert ("attention_mask" in report["inputs"]) is checked
        assert code == (1 if checked else 0)  # DeBERTa's reference: every token real
        assert main([*argv, *texts]) == 0  # the tokenizer's mask: the same, bool or not
        assert json.loads(capsys.readouterr()[0])["inputs"].get("attention_mask", {"ok": 1})["ok"]


@pytest.mark.parametrize(
    ("given", "result"),
    [
        (np.zeros((0, 4), int), {"ok": False, "candidate_shape": [0, 4], "expected_shape": [1, 4]}),
        (np.array([2]), {"ok": False, "candidate_shape": [1], "expected_shape": [1, 4]}),
        (np.zeros((1, 1, 1, 4)), {"ok": False, "candidate_shape": [1, 1, 1, 4],
                                  "expected_shape": [1, 4]}),
        (np.array([2, 13, 14, 3]), {"ok": True, "differ": 0, "of": 4}),  # (L,): shared rows
        (None, None),  # absent or a JSON null: not checked
    ],
)  # fmt: skip
def test_inputs_of_other_shapes_or_not_arrays(tiny_stages, given, result):
    from npbert.verify import compare as compare_stages

    candidate = {"embeddings": tiny_stages[1]["embeddings"], "input_ids": given}
    inputs = {"input_ids": np.array([[2, 13, 14, 3]])}
    report = compare_stages(candidate, *tiny_stages, inputs=inputs)
    assert report["inputs"].get("input_ids") == result
    with pytest.raises(npbert.InputError, match="inputs must be a dict"):
        compare_stages(candidate, *tiny_stages, inputs=inputs["input_ids"])


@pytest.mark.parametrize(
    "given",
    ["ids", np.array(3), [[2, 13], [14]], {"a": 1}, np.array(["2", "13", "14", "3"]),
     np.array(["2026-01-01"] * 4, "datetime64[D]"), [[2, 13, 10**23, 3]]],
)  # fmt: skip
def test_a_candidates_input_that_is_not_an_array_of_numbers_is_refused(tiny_stages, given):
    """It was left unchecked without a word, and a port that wrote its ids wrong passed."""
    from npbert.verify import compare as compare_stages

    candidate = {"embeddings": tiny_stages[1]["embeddings"], "input_ids": given}
    inputs = {"input_ids": np.array([[2, 13, 14, 3]])}
    with pytest.raises(npbert.InputError, match="the candidate's input_ids is not an array of"):
        compare_stages(candidate, *tiny_stages, inputs=inputs)


def test_no_float16_note_where_the_reference_is_float16_too(tmp_path, capsys):
    # A float16 checkpoint's lookups are float16 numbers: a wrong word stage is not the format.
    model = TINY.parent / "tiny-bert-fp16"
    weights = npbert.load_weights(model)
    ids = np.array([[2, 13, 14, 3]])
    references = [
        npbert.embed_stages(weights, ids, dtype=d, project=True) for d in (np.float64, np.float32)
    ]
    from npbert.verify import compare as compare_stages

    wrong = npbert.embed_stages(weights, ids + 1)
    report = compare_stages({"word": wrong["word"], "embeddings": wrong["embeddings"]}, *references)
    assert report["first_disagreeing_stage"] == "word"
    assert "float16 number" not in str(report)


def test_a_bare_output_of_neither_shape_gets_no_projection_note(tmp_path, capsys):
    arrays = tiny_albert_outputs(tmp_path, capsys)
    np.save(tmp_path / "e.npy", arrays["embeddings"][:, :-1])  # a token short
    code, out = compare_albert(capsys, tmp_path / "e.npy")
    assert code == 1 and "SHAPE" in out and "note:" not in out


def test_ulps_of_an_output_whose_reference_is_all_zero_are_none(tmp_path, capsys):
    deberta = TINY.parent / "tiny-deberta"
    np.save(tmp_path / "ids.npy", np.array([[1, 7, 8, 2]]))
    np.save(tmp_path / "mask.npy", np.zeros((1, 4), int))
    np.save(tmp_path / "c.npy", np.zeros((1, 4, 32), np.float32))
    files = ["--ids-file", str(tmp_path / "ids.npy"), "--attention-mask-file"]
    files.append(str(tmp_path / "mask.npy"))
    argv = ["compare", str(tmp_path / "c.npy"), "--model", str(deberta), *files]
    assert main(argv) == 0
    assert (
        "ULPs from the float64 reference: none, the reference is 0 at all 128"
        in (capsys.readouterr()[0])
    )
    assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr()[0])["embeddings"]
    assert summary["max_ulp_float32"] is None and summary["median_ulp_float32"] is None


@pytest.mark.parametrize(
    ("embedder", "directory", "message"),
    [  # each raised AttributeError or TypeError, or named --out from Python
        ("a path", "v", "model must be npbert's Embedder (npbert.Embedder.from_pretrained), "),
        ("embedder", None, "directory must be a path (a str or os.PathLike), got None"),
        ("embedder", b"v", "directory must be a path"),
        ("embedder", "", "the directory is empty: give a new directory for the vectors"),
        ("embedder", ".", ". exists: give a new directory for the vectors"),
    ],
)
def test_write_vectors_checks_its_arguments(embedder, directory, message):
    from npbert.verify.vectors import write_vectors

    tiny = npbert.Embedder.from_pretrained(TINY)
    given = tiny if embedder == "embedder" else str(TINY)
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        write_vectors(given, directory)


def test_token_ids_given_as_the_candidate_are_named_as_whole_numbers(tmp_path, capsys, minilm_dir):
    embedder = npbert.Embedder.from_pretrained(minilm_dir)
    ids = embedder.encode(["i am sinan"]).input_ids  # (1, L) int
    output = npbert.embed(embedder.weights, ids)  # (1, L, E)
    cases = {
        "ids": (ids, True),  # the wrong shape, and integers
        "rounded": (np.round(output * 10).astype(np.int32), True),  # the shape, integers
        "zeros": (np.zeros_like(output), False),  # a port that wrote nothing: not ids
        "0 and 1": ((output > 0).astype(np.float32), False),  # as sin, cos at position 0
        "off": (output + np.float32(1e-3), False),  # wrong, but real-valued
    }
    for name, (candidate, noted) in cases.items():
        np.save(tmp_path / f"{name}.npy", candidate)
        code = main(
            ["compare", str(tmp_path / f"{name}.npy"), "--model", str(minilm_dir), "i am sinan"]
        )
        out = capsys.readouterr()[0]
        assert code == 1, name
        assert ("every value is a whole number, as token ids are" in out) == noted, (name, out)


@pytest.mark.parametrize("stand_in", ["null", '"NaN"', '"Infinity"'])
def test_a_json_candidates_stand_in_for_nan_is_reported_where_it_is(stand_in, tmp_path, capsys):
    """JavaScript's JSON.stringify writes NaN and Infinity as null; others write strings. Such
    a value is the port's bug to find, as a NaN in a .npy is, not a file npbert cannot read."""
    argv = ["--model", str(TINY), "a b"]
    main(["embed", "a b", "--model", str(TINY), "--out", str(tmp_path / "e.npy")])
    rows = np.load(tmp_path / "e.npy").tolist()  # (1, L, E)
    text = json.dumps({"embeddings": rows})
    first = json.dumps(rows[0][1][0])  # the value at (0, 1, 0), as json.dumps wrote it
    (tmp_path / "c.json").write_text(text.replace(first, stand_in, 1))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "c.json"), *argv]) == 1
    assert "1 of the candidate's values is NaN or infinite, the first at (0, 1, 0)" in (
        capsys.readouterr().out
    )


def test_a_ragged_json_candidate_says_where_its_shape_breaks(tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"embeddings": [[[0.1, 0.2], [0.1]]]}')
    assert main(["compare", str(tmp_path / "c.json"), "--model", str(TINY), "a"]) == 2
    assert "inhomogeneous shape after 2 dimensions" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda mask: mask[:, :2], "attention_mask has shape (2, 2), but input_ids has (2, 4)"),
        (lambda mask: mask * 2, "attention_mask[0, 0] = 2 is not 0 or 1"),
        (lambda mask: mask.T, "attention_mask has shape (4, 2)"),
    ],
)
def test_compare_from_python_checks_the_attention_mask(change, message):
    """A mask of another shape silently dropped the padding note; one of 2s kept it."""
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY)
    ids = np.array([[2, 7, 5, 3], [2, 6, 3, 0]])
    mask = (ids != 0).astype(np.int64)
    references = [
        npbert.embed_stages(weights, ids, dtype=d, project=True) for d in (np.float64, np.float32)
    ]
    candidate = {"embeddings": references[1]["embeddings"]}
    assert compare_stages(candidate, *references, attention_mask=mask)["ok"]
    with pytest.raises(npbert.InputError, match=re.escape(message)):
        compare_stages(candidate, *references, attention_mask=change(mask))


def test_bigbirds_word_rows_given_rescaled_are_named_as_the_rescale(tmp_path, capsys):
    """A port that exposes BigBird's word rows as its module computes them, times sqrt(H):
    npbert's 'word' holds them as stored, and its 'sum' scaled."""
    big_bird = str(TINY.parent / "tiny-big-bird")
    main(["embed", "a b", "--model", big_bird, "--stages", "--out", str(tmp_path / "s.npz")])
    arrays = dict(np.load(tmp_path / "s.npz"))
    width = arrays["word"].shape[-1]
    arrays["word"] = arrays["word"] * np.float32(np.sqrt(width))
    np.savez(tmp_path / "s.npz", **arrays)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "s.npz"), "--model", big_bird, "a b"]) == 1
    out = capsys.readouterr().out
    assert f"times the reference's, sqrt({width}): the scale BigBird gives" in out
    assert "sum            ok" in out


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["sum", "normalized", "embeddings", "word"])
def test_a_float32_stage_scaled_by_one_factor_is_named_so(tmp_path, capsys, minilm_dir, stage):
    """npbert's own float32 stages, one of them doubled: the note says so, though its values
    near 0 are far off in relative terms (float32 against the float64 reference)."""
    path, text = str(tmp_path / "s.npz"), "I am Sinan, and this is a sentence of some length"
    main(["embed", text, "--model", str(minilm_dir), "--stages", "--out", path])
    arrays = dict(np.load(path))
    doubled, tenfold = arrays[stage] * np.float32(2), arrays[stage] * np.float32(10)
    cases = ((doubled, "2"), (doubled.astype(np.float16), "2"), (tenfold, "10"))  # not 1e+01
    for stored, factor in cases:  # float16 is told as such, too
        np.savez(path, **{**arrays, stage: stored})
        capsys.readouterr()
        assert main(["compare", path, "--model", str(minilm_dir), text]) == 1
        assert f"every value is {factor} times the reference's" in capsys.readouterr().out


def test_a_stage_wrong_by_a_factor_per_row_is_not_called_scaled(tmp_path, capsys, minilm_dir):
    """LayerNorm with eps 1e-5 scales each row by its own factor: no one factor fits."""
    path, text = str(tmp_path / "s.npz"), "I am Sinan, and this is a sentence of some length"
    main(["embed", text, "--model", str(minilm_dir), "--stages", "--out", path])
    arrays = dict(np.load(path))
    centered = arrays["sum"] - arrays["sum"].mean(-1, keepdims=True)
    arrays["normalized"] = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-5)
    np.savez(path, **arrays)
    capsys.readouterr()
    assert main(["compare", path, "--model", str(minilm_dir), text]) == 1
    out = capsys.readouterr().out
    assert "normalized     FAIL" in out and "times the reference's" not in out


@pytest.mark.parametrize("kind", ["normalized", "swapped", "right"])
def test_an_output_that_is_another_stage_or_has_swapped_axes_says_so(kind, tmp_path, capsys):
    texts = ["a b c", "b"]  # a batch of 2, 5 tokens each: B != L
    main(["embed", *texts, "--model", str(TINY), "--stages", "--out", str(tmp_path / "s.npz")])
    stages = np.load(tmp_path / "s.npz")
    output = {
        "normalized": stages["normalized"],  # gamma and beta never applied
        "swapped": stages["embeddings"].transpose(1, 0, 2),  # (L, B, E)
        "right": stages["embeddings"],
    }[kind]
    np.save(tmp_path / "c.npy", output)
    capsys.readouterr()
    code = main(["compare", str(tmp_path / "c.npy"), "--model", str(TINY), *texts])
    out = capsys.readouterr().out
    assert code == (0 if kind == "right" else 1)
    said = "diagnosis: matches the reference with the LayerNorm's weight and bias left out"
    assert (said in out) == (kind == "normalized")  # in place of the note: "it is the
    # reference's 'normalized' stage", which the diagnosis makes exact
    assert ("its first two axes swapped" in out) == (kind == "swapped")


def test_a_json_candidate_is_float64_only_where_its_numbers_are(tmp_path, capsys):
    """JSON's numbers are read as float64 whatever width wrote them: a float32 port's, as
    JavaScript's Float32Array gives them, is not told it may be held to float64's tolerance."""
    main(["embed", "a b", "--model", str(TINY), "--out", str(tmp_path / "e.npz")])
    output, ids = (np.load(tmp_path / "e.npz")[k] for k in ("embeddings", "input_ids"))
    wide = npbert.embed(npbert.load_weights(TINY), ids, dtype=np.float64)
    nine_digits = np.vectorize(lambda v: float(f"{v:.9g}"))(output)  # C's %.9g
    shortest = np.vectorize(lambda v: float(str(v)))(output)  # NumPy's, Go's, Rust's form
    for values, noted in ((output, False), (nine_digits, False), (shortest, False), (wide, True)):
        (tmp_path / "c.json").write_text(json.dumps({"embeddings": values.tolist()}))
        capsys.readouterr()
        assert main(["compare", str(tmp_path / "c.json"), "--model", str(TINY), "a b"]) == 0
        assert ("float64 values, held to float32's tolerance" in capsys.readouterr().out) == noted


def test_a_float64_candidate_held_to_float32s_tolerance_is_told_so(tmp_path, capsys):
    """A 'float64' port that computes in float32 passes at float32's tolerance: the note says
    what holds it to float64's."""
    main(["embed", "a b", "--model", str(TINY), "--out", str(tmp_path / "e.npy")])
    output = np.load(tmp_path / "e.npy")
    for dtype, noted in ((np.float64, True), (np.float32, False)):
        np.save(tmp_path / "c.npy", output.astype(dtype))
        capsys.readouterr()
        assert main(["compare", str(tmp_path / "c.npy"), "--model", str(TINY), "a b"]) == 0
        assert ("float64 values, held to float32's tolerance" in capsys.readouterr().out) == noted
        argv = ["compare", str(tmp_path / "c.npy"), "--model", str(TINY), "a b", "--atol", "1e-12"]
        assert main(argv) == 1 and "held to float32" not in capsys.readouterr().out


@pytest.mark.slow
def test_explain_of_an_infinite_gamma_says_it_without_a_python_warning(tmp_path):
    """Inf in gamma makes Inf outputs in both paths: explain's own check subtracted them (inf -
    inf), and NumPy's RuntimeWarning reached the terminal with its file and line."""
    shutil.copytree(TINY, tmp_path / "inf")
    tensors = load_file(str(TINY / "model.safetensors"))
    gamma = next(name for name in tensors if name.endswith(("LayerNorm.weight", "LayerNorm.gamma")))
    tensors[gamma][0] = np.inf
    save_file(tensors, str(tmp_path / "inf" / "model.safetensors"))
    command = [sys.executable, "-m", "npbert", "explain", "the", "--model", str(tmp_path / "inf")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)  # as a user
    assert result.returncode == 0  # sees it: pytest would catch the warning itself
    assert "Note: 3 output values are NaN or infinite" in result.stdout  # dimension 0, 3 tokens
    assert "RuntimeWarning" not in result.stderr, result.stderr


def test_deberta_references_made_without_the_mask_are_suspected(tmp_path):
    """A DeBERTa port that zeroes padding, checked from Python against references made without
    the mask (as embed_stages' defaults give), was told its padding rows were wrong."""
    from npbert.verify import compare as compare_stages

    weights = npbert.load_weights(TINY.parent / "tiny-deberta")
    ids = np.array([[1, 7, 9, 2], [1, 8, 2, 0]])
    mask = (ids != 0).astype(np.int64)
    port = npbert.embed(weights, ids, attention_mask=mask)  # padding zeroed
    for masked, noted in ((False, True), (True, False)):
        given = {"attention_mask": mask} if masked else {}
        references = [
            npbert.embed_stages(weights, ids, dtype=d, project=True, **given)
            for d in (np.float64, np.float32)
        ]
        report = compare_stages({"embeddings": port}, *references, attention_mask=mask)
        assert report["ok"] == masked
        notes = report["stages"]["embeddings"].get("notes", [])
        assert any("references made without it" in note for note in notes) == noted, notes


# --- products: held to what float32 products of their length and size can differ by ----------

LARGE = TINY.parent / "tiny-electra-small"  # E 128 -> H 256, projected values up to about 100


def projection_references(weights, ids, types=None) -> list[dict]:
    """embed_stages in float64 and float32, projected: compare's references."""
    return [npbert.embed_stages(weights, ids, types, dtype=d, project=True)
            for d in (np.float64, np.float32)]  # fmt: skip


def summed_in_order(x: np.ndarray, weight: np.ndarray, bias, order) -> np.ndarray:
    """x @ weight.T + bias in float32, one term at a time in the given order of E: a correct
    float32 product that rounds unlike BLAS's."""
    total = np.zeros((*x.shape[:-1], weight.shape[0]), np.float32)
    for e in order:
        total += x[..., e, None] * weight[:, e]
    return total + bias


@pytest.mark.parametrize("golden", ["padded_batch", "pair", "full_length"])
def test_correct_float32_projections_of_large_values_pass(golden):
    from npbert.verify import compare as compare_stages

    arrays, _ = load_golden(f"tiny_electra_small_{golden}")
    weights = npbert.load_weights(LARGE)
    ids, types = arrays["input_ids"], arrays["token_type_ids"]
    references = projection_references(weights, ids, types)
    x, w, b = arrays["embeddings"], weights.projection_weight, weights.projection_bias
    width = w.shape[1]
    candidates = {
        "transformers": arrays["projected"],
        "npbert": npbert.embed(weights, ids, types, project=True),
        "summed in order": summed_in_order(x, w, b, range(width)),
        "summed backwards": summed_in_order(x, w, b, reversed(range(width))),
    }
    assert np.abs(arrays["projected"]).max() > 64  # where a float32 step is 7.6e-6
    for who, projected in candidates.items():
        report = compare_stages({"projected": projected}, *references, weights=weights)
        assert report["ok"], (who, report["stages"]["projected"])
        assert "a matrix product, held to atol" in report["stages"]["projected"]["notes"][0]


def test_projection_bugs_fail_at_large_values():
    from npbert.verify import compare as compare_stages

    arrays, _ = load_golden("tiny_electra_small_pair")
    weights = npbert.load_weights(LARGE)
    ids, types = arrays["input_ids"], arrays["token_type_ids"]
    references = projection_references(weights, ids, types)
    x, w, b = arrays["embeddings"], weights.projection_weight, weights.projection_bias
    bugs = {
        "projection left out": x,
        "bias left out": x @ w.T,
        "another matrix (rows in another order)": x @ w[::-1].T + b,
        "in bfloat16": (x @ w.T + b).view(np.uint32) >> 16 << 16,
        "bias added twice": x @ w.T + 2 * b,
    }
    bugs["in bfloat16"] = bugs["in bfloat16"].view(np.float32)
    for bug, projected in bugs.items():
        report = compare_stages({"projected": projected}, *references, weights=weights)
        assert report["first_disagreeing_stage"] == "projected", bug


def test_a_transposed_square_projection_fails(tmp_path):
    from conftest import widened

    from npbert.verify import compare as compare_stages

    weights = widened(tmp_path, "tiny-albert", 64, 64)  # ALBERT projects at E = H too
    ids = np.random.default_rng(0).integers(5, weights.config.vocab_size, (2, 9))
    references = projection_references(weights, ids)
    x, w, b = references[1]["embeddings"], weights.projection_weight, weights.projection_bias
    right = compare_stages({"projected": x @ w.T + b}, *references, weights=weights)
    transposed = compare_stages({"projected": x @ w + b}, *references, weights=weights)
    assert right["ok"] and transposed["first_disagreeing_stage"] == "projected"


@pytest.mark.slow
def test_the_command_passes_npbert_and_transformers_projections_of_large_values(tmp_path, capsys):
    arrays, _ = load_golden("tiny_electra_small_padded_batch")
    ids, types = arrays["input_ids"], arrays["token_type_ids"]
    weights = npbert.load_weights(LARGE)
    ours = npbert.embed(weights, ids, types, project=True)
    for who, projected in (("transformers", arrays["projected"]), ("npbert", ours)):
        np.save(tmp_path / f"{who}.npy", projected)
        code, report, _ = compare(capsys, tmp_path / f"{who}.npy", LARGE, ids, types, tmp_path)
        assert code == 0 and report["ok"], (who, report["stages"])
    wrong = arrays["projected"] - weights.projection_bias
    np.save(tmp_path / "wrong.npy", wrong)
    code, report, _ = compare(capsys, tmp_path / "wrong.npy", LARGE, ids, types, tmp_path)
    assert code == 1 and report["first_disagreeing_stage"] == "projected"
