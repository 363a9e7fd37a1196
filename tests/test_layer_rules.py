"""The rules the rest of the family adds to the layer: positions from 2 (Nystromformer, YOSO,
MRA), no norm (Megatron-BERT, XLM-RoBERTa-XL), ESM's token dropout, MobileBERT's trigram and
NoNorm, and the settings and model types refused by name. Each family's numbers against
transformers: test_families.py."""

import json
import shutil

import numpy as np
import pytest
from conftest import DATA
from safetensors.numpy import load_file, save_file

import npbert
from npbert import InputError
from npbert.cli import main
from npbert.layer.families import REFUSED
from npbert.layer.ragged import embed_encodings


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def changed(tmp_path, name: str, **changes):
    """tests/data/tiny-<name> with config.json's keys changed."""
    shutil.copytree(DATA / f"tiny-{name}", tmp_path, dirs_exist_ok=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | changes))
    return tmp_path


@pytest.mark.parametrize("name", ["nystromformer", "yoso", "mra"])
def test_positions_start_at_2_and_the_limit_is_config_jsons(name):
    weights = npbert.load_weights(DATA / f"tiny-{name}")
    stated = json.loads((DATA / f"tiny-{name}" / "config.json").read_text())
    assert weights.config.max_length == stated["max_position_embeddings"]  # 2 rows fewer
    stages = npbert.embed_stages(weights, [5, 6, 7])
    np.testing.assert_array_equal(stages["position"], weights.position_embeddings[2:5])
    with pytest.raises(InputError, match=rf"positions allow \({weights.config.max_length}:"):
        npbert.embed(weights, np.full(weights.config.max_length + 1, 5))


def test_positions_report_leaves_out_the_rows_nystromformer_never_reads(capsys):
    code, out, _ = cli(capsys, "positions", "--model", DATA / "tiny-nystromformer", "--json")
    assert code == 0
    assert json.loads(out)["first_row"] == 2


@pytest.mark.parametrize("name", ["megatron-bert", "xlm-roberta-xl"])
def test_without_a_norm_the_output_is_the_sum(name, capsys):
    weights = npbert.load_weights(DATA / f"tiny-{name}")
    assert weights.layer_norm_weight is None and weights.config.norm is None
    stages = npbert.embed_stages(weights, [[5, 6, 7, 8]])
    assert "normalized" not in stages
    np.testing.assert_array_equal(stages["embeddings"], stages["sum"])
    code, out, _ = cli(capsys, "explain", "I am Sinan", "--model", DATA / f"tiny-{name}")
    assert code == 0 and "Output: the sum, not normalized" in out and "sqrt(var" not in out


def test_compare_names_a_layer_norm_the_layer_does_not_have(capsys, tmp_path):
    model = DATA / "tiny-megatron-bert"
    np.save(tmp_path / "ids.npy", np.array([[2, 13, 14, 15, 16, 3]]))
    weights = npbert.load_weights(model)
    x = npbert.embed(weights, np.load(tmp_path / "ids.npy"))
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.save(tmp_path / "port.npy", normed.astype(np.float32))
    code, out, _ = cli(
        capsys, "compare", tmp_path / "port.npy", "--model", model,
        "--ids-file", tmp_path / "ids.npy",
    )  # fmt: skip
    assert code == 1
    assert "a LayerNorm (eps 1e-05) the layer does not have" in out
    assert "eps 1e-12" not in out.split("diagnosis")[1]  # no LayerNorm entry of its own


@pytest.mark.parametrize("name", ["megatron-bert", "mobilebert"])
def test_float16_warning_bounds_a_sum_without_a_layer_norm(tmp_path, capsys, name):
    """No LayerNorm bounds the output: Megatron-BERT's is the sum, NoNorm scales it."""
    from npbert.cli.inputs import check_float32

    directory = changed(tmp_path, name)
    tensors = load_file(directory / "model.safetensors")
    tensors["embeddings.word_embeddings.weight"] *= 1e6
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    check_float32(npbert.load_weights(directory), "float16")
    assert "past float16's largest number" in capsys.readouterr().err


def esm_ids(weights, rows: int = 3, length: int = 9) -> np.ndarray:
    ids = np.random.default_rng(0).integers(4, 32, (rows, length))
    ids[:, 0], ids[:, -1] = 0, 2  # <cls> ... <eos>
    ids[0, [2, 5]] = weights.config.mask_token_id
    return ids


@pytest.mark.parametrize("name", ["esm", "esm-2"])
def test_token_dropout_zeroes_mask_rows_and_scales_the_rest_by_the_share_of_masks(name):
    weights = npbert.load_weights(DATA / f"tiny-{name}")
    ids = esm_ids(weights)
    word = npbert.embed_stages(weights, ids, dtype=np.float64)
    dropped = word["sum"] - word.get("position", 0)  # (B, L, E): the word rows as rescaled
    np.testing.assert_array_equal(dropped[0, [2, 5]], 0)
    ratio = dropped[0, 1] / word["word"][0, 1]
    share = np.float32(2) / np.float32(9)  # in float32, as ESM's module computes it
    np.testing.assert_allclose(ratio, 0.88 / np.float64(np.float32(1) - share), rtol=1e-12)
    np.testing.assert_allclose(dropped[1] / word["word"][1], 0.88, rtol=1e-12)  # no <mask>


def test_token_dropout_counts_the_tokens_the_attention_mask_keeps():
    weights = npbert.load_weights(DATA / "tiny-esm")
    ids = esm_ids(weights, rows=1)
    padded = np.concatenate([ids, np.full((1, 3), weights.config.pad_token_id)], axis=1)
    mask = (np.arange(12) < 9).astype(np.int64)[None]
    alone = npbert.embed(weights, ids, attention_mask=np.ones_like(ids))
    batch = npbert.embed(weights, padded, attention_mask=mask)
    np.testing.assert_array_equal(batch[:, :9], alone)
    np.testing.assert_array_equal(batch[:, 9:], 0)  # padding zeroed


def test_a_sequence_all_mask_is_refused_not_divided_by_zero():
    weights = npbert.load_weights(DATA / "tiny-esm-2")
    mask_id = weights.config.mask_token_id
    with pytest.raises(InputError, match=r"input_ids\[1\] has 2 <mask> tokens .* among its 2"):
        npbert.embed(weights, [[5, 6], [mask_id, mask_id]])


def test_texts_back_to_back_are_each_as_alone_with_token_dropout():
    weights = npbert.load_weights(DATA / "tiny-esm")
    ids = esm_ids(weights)

    class Encoded:  # what embed_encodings reads of a tokenizers Encoding
        def __init__(self, row):
            self.ids, self.type_ids = list(row), [0] * len(row)

    shard = embed_encodings(weights, [Encoded(row[: 9 - i]) for i, row in enumerate(ids)])
    start = 0
    for i, row in enumerate(ids):
        alone = npbert.embed(weights, row[: 9 - i])
        np.testing.assert_array_equal(shard["embeddings"][start : start + len(alone)], alone)
        start += len(alone)


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("ibert", {"quant_mode": True}, "quant_mode=True is refused: I-BERT's integer-only"),
        ("roberta-prelayernorm", {"position_embedding_type": "relative_key"}, "transformers 4"),
        ("esm", {"mask_token_id": None}, "token_dropout is true, but mask_token_id is missing"),
        ("esm", {"pad_token_id": None}, "pad_token_id is null or missing"),
    ],
)
def test_settings_the_layer_does_not_compute_are_refused(tmp_path, name, changes, message):
    with pytest.raises(InputError, match=message):
        npbert.load_weights(changed(tmp_path, name, **changes))


@pytest.mark.parametrize("model_type", ["tapas", "layoutlm"])
def test_layers_with_inputs_or_steps_of_their_own_are_refused_by_name(tmp_path, model_type):
    directory = changed(tmp_path, "bert-generation", model_type=model_type)
    with pytest.raises(InputError) as refused:
        npbert.load_weights(directory)
    assert f"'{model_type}' is refused: {REFUSED[model_type]}" in str(refused.value)


def test_esm_rotary_has_no_position_table_and_its_text_is_refused_by_name(tmp_path):
    weights = npbert.load_weights(DATA / "tiny-esm-2")
    assert weights.position_embeddings is None and weights.config.positions == "none"
    with pytest.raises(InputError, match="EsmTokenizer"):
        npbert.Embedder.from_pretrained(DATA / "tiny-esm-2")


def test_trigram_sets_each_word_row_beside_the_next_and_the_previous():
    weights = npbert.load_weights(DATA / "tiny-mobilebert")
    stages = npbert.embed_stages(weights, [[2, 13, 14, 3]])
    word, trigram = stages["word"][0], stages["trigram"][0]  # (L, E), (L, 3E)
    zero = np.zeros_like(word[0])
    for i in range(4):
        following = word[i + 1] if i < 3 else zero
        preceding = word[i - 1] if i > 0 else zero
        np.testing.assert_array_equal(trigram[i], np.concatenate([following, word[i], preceding]))


def test_mobilebert_texts_back_to_back_are_each_as_alone_not_as_neighbours():
    weights = npbert.load_weights(DATA / "tiny-mobilebert")
    texts = [[2, 13, 14, 3], [], [2, 15, 3], [2, 16, 17, 18, 3]]  # an empty text has no rows

    class Encoded:  # what embed_encodings reads of a tokenizers Encoding
        def __init__(self, row):
            self.ids, self.type_ids = row, [0] * len(row)

    shard = embed_encodings(weights, [Encoded(row) for row in texts])["embeddings"]
    alone = np.concatenate([npbert.embed(weights, row) for row in texts if row])
    np.testing.assert_array_equal(shard, alone)


def test_compare_names_a_layer_norm_in_place_of_no_norm(capsys, tmp_path):
    model = DATA / "tiny-mobilebert"
    ids = np.array([[2, 13, 14, 15, 3]])
    np.save(tmp_path / "ids.npy", ids)
    summed = npbert.embed_stages(npbert.load_weights(model), ids)["sum"]
    weights = npbert.load_weights(model)
    normed = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(
        summed.var(-1, keepdims=True) + 1e-5
    )
    port = normed * weights.layer_norm_weight + weights.layer_norm_bias
    np.save(tmp_path / "port.npy", port.astype(np.float32))
    code, out, _ = cli(
        capsys, "compare", tmp_path / "port.npy", "--model", model,
        "--ids-file", tmp_path / "ids.npy",
    )  # fmt: skip
    assert code == 1 and "a LayerNorm (eps 1e-05) in place of NoNorm" in out


def test_a_mobilebert_linear_of_another_width_than_its_trigram_is_refused(tmp_path):
    directory = changed(tmp_path, "mobilebert", trigram_input=False)  # its Linear takes 3E
    with pytest.raises(InputError, match="trigram_input is false, so its Linear takes 16"):
        npbert.load_weights(directory)


def _token_dropout_left_out(weights, ids):
    import dataclasses

    config = dataclasses.replace(weights.config, mask_token_id=None)
    return npbert.embed(dataclasses.replace(weights, config=config), ids)


def _trigram_reversed(weights, ids):
    stages = npbert.embed_stages(weights, ids, dtype=np.float64)
    following, word, preceding = np.split(stages["trigram"], 3, axis=-1)
    x = np.concatenate([preceding, word, following], axis=-1) @ weights.projection_weight.T
    summed = x + weights.projection_bias + stages["position"] + stages["token_type"]
    return summed * weights.layer_norm_weight + weights.layer_norm_bias  # NoNorm


@pytest.mark.parametrize(
    ("name", "port", "named"),
    [
        ("esm", _token_dropout_left_out, "ESM's token dropout left out"),
        ("mobilebert", _trigram_reversed, "the trigram as [previous, this, next]"),
        ("fnet", lambda w, ids: npbert.embed_stages(w, ids)["layer_norm"], "Linear FNet's"),
    ],
)
def test_compare_names_the_bugs_of_a_familys_own_steps(capsys, tmp_path, name, port, named):
    model = DATA / f"tiny-{name}"
    weights = npbert.load_weights(model)
    ids = esm_ids(weights, rows=2) if name == "esm" else np.array([[2, 13, 14, 15, 3]])
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "port.npy", np.asarray(port(weights, ids), np.float32))
    code, out, _ = cli(
        capsys, "compare", tmp_path / "port.npy", "--model", model,
        "--ids-file", tmp_path / "ids.npy",
    )  # fmt: skip
    assert code == 1 and named in out.split("diagnosis:")[1], out
