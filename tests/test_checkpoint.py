"""Reading the embedding tensors: names, shards, dtypes, and clear refusals."""

import json
import re
import shutil

import numpy as np
import pytest
from conftest import DATA, TINY
from safetensors.numpy import load_file, save_file

import npbert
from npbert import InputError


@pytest.fixture(scope="module")
def reference():
    return npbert.load_weights(TINY)


def make_checkpoint(tmp_path, tensors, config_changes=None, files=("vocab.txt",)):
    """A copy of tiny-bert with other tensors and config entries."""
    config = json.loads((TINY / "config.json").read_text())
    config.update(config_changes or {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in files:
        shutil.copy(TINY / name, tmp_path / name)
    if tensors is not None:
        save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def renamed(rename):
    return {rename(k): v for k, v in load_file(str(TINY / "model.safetensors")).items()}


def assert_same_weights(a, b):
    for key in (
        "word_embeddings",
        "position_embeddings",
        "token_type_embeddings",
        "layer_norm_weight",
        "layer_norm_bias",
    ):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    assert a.config == b.config


def test_weights_are_float32_with_the_contract_names(reference):
    assert reference.word_embeddings.shape == (reference.config.vocab_size, 32)
    assert reference.position_embeddings.shape == (128, 32)
    assert reference.token_type_embeddings.shape == (2, 32)
    assert reference.layer_norm_weight.shape == reference.layer_norm_bias.shape == (32,)
    assert all(
        a.dtype == np.float32 for a in (reference.word_embeddings, reference.layer_norm_bias)
    )
    assert reference.config.layer_norm_eps == 1e-12
    assert reference.projection_weight is None and reference.config.model_type == "bert"


@pytest.mark.parametrize(
    "rename",
    [
        lambda k: k.removeprefix("bert."),  # all-MiniLM-L6-v2 style
        lambda k: k.replace(".gamma", ".weight").replace(".beta", ".bias"),  # bert. + weight/bias
    ],
    ids=["no-prefix", "weight-bias"],
)
def test_tensor_name_variants_load_the_same(tmp_path, reference, rename):
    assert_same_weights(npbert.load_weights(make_checkpoint(tmp_path, renamed(rename))), reference)


@pytest.mark.parametrize("prefix", ["roberta.", "model.", "bert.bert."])
def test_tensors_under_another_models_prefix_are_refused(tmp_path, prefix):
    make_checkpoint(tmp_path, renamed(lambda k: prefix + k.removeprefix("bert.")))
    with pytest.raises(InputError, match=r"model_type 'bert' keeps .* the config and the tensors"):
        npbert.load_weights(tmp_path)


def test_position_ids_buffer_is_ignored(tmp_path, reference):
    tensors = renamed(lambda k: k)
    assert "bert.embeddings.position_ids" in tensors
    del tensors["bert.embeddings.position_ids"]
    assert_same_weights(npbert.load_weights(make_checkpoint(tmp_path, tensors)), reference)


def test_sharded_checkpoint_opens_only_the_needed_shards(tmp_path, reference):
    tensors = renamed(lambda k: k)
    embeddings = {k: v for k, v in tensors.items() if ".embeddings." in k}
    encoder = {k: v for k, v in tensors.items() if k not in embeddings}
    make_checkpoint(tmp_path, None)
    save_file(embeddings, str(tmp_path / "model-00001-of-00002.safetensors"))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"not safetensors at all")
    weight_map = {k: "model-00001-of-00002.safetensors" for k in embeddings}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in encoder})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    weights = npbert.load_weights(tmp_path)
    assert_same_weights(weights, reference)
    assert weights.files == (tmp_path / "model-00001-of-00002.safetensors",)


@pytest.mark.parametrize("variant", ["tiny-bert-fp16", "tiny-bert-bf16"])
def test_half_precision_checkpoints_load_as_float32(variant):
    weights = npbert.load_weights(DATA / variant)
    assert weights.word_embeddings.dtype == np.float32
    assert weights.layer_norm_weight.dtype == np.float32
    # Read-only like float32's maps: the fast path's cached tables cannot go stale under an edit.
    for name in ["word_embeddings", "position_embeddings", "layer_norm_weight"]:
        with pytest.raises(ValueError, match="read-only"):
            getattr(weights, name)[0] = 1


def test_bfloat16_widening_is_exact(reference):
    # Every bf16 value is a float32 with the low 16 bits zero, and the bf16 file was made by
    # torch from tiny-bert's float32 weights by rounding: the decoded values are close to them.
    weights = npbert.load_weights(DATA / "tiny-bert-bf16")
    bits = weights.word_embeddings.view(np.uint32)
    assert not (bits & 0xFFFF).any()
    np.testing.assert_allclose(weights.word_embeddings, reference.word_embeddings, rtol=2**-8)


def test_an_index_of_pickled_shards_is_refused_by_name(tmp_path):
    """An index naming .bin shards (pytorch_model.bin.index.json renamed, or a tool's) was
    refused only by the header check of the pickle, as a damaged file; over the Hub, --full
    downloaded the whole shard first."""
    make_checkpoint(tmp_path, None)
    shard = "pytorch_model-00001-of-00001.bin"
    (tmp_path / shard).write_bytes(b"\x80\x04 pickled")
    weight_map = dict.fromkeys(renamed(lambda k: k), shard)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    message = (
        f"is in {shard}, not a .safetensors file: npbert reads safetensors and never unpickles"
    )
    with pytest.raises(InputError, match=re.escape(message)):
        npbert.load_weights(tmp_path)


def test_pickle_only_checkpoint_is_refused(tmp_path):
    make_checkpoint(tmp_path, None)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04 pickled")
    with pytest.raises(InputError, match=r"never unpickles.*safe_serialization"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key' is"),
        ({"vocab_size": 1000}, r"vocab_size is 1000, but the tensors have 87"),
        ({"max_position_embeddings": 512}, r"max_position_embeddings is 512, but the tensors have"),
        ({"type_vocab_size": 3}, r"type_vocab_size is 3, but the tensors have 2"),
        ({"hidden_size": 64}, "hidden_size is 64, but the tensors have 32"),
    ],
)
def test_config_disagreements_are_refused(tmp_path, changes, message):
    make_checkpoint(tmp_path, renamed(lambda k: k), changes)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("shape", [(87 * 32,), (87, 32, 1)])
def test_a_word_table_that_is_not_2d_is_blamed_for_itself(tmp_path, shape):
    tensors = renamed(lambda k: k)
    word = "bert.embeddings.word_embeddings.weight"
    tensors[word] = tensors[word].reshape(shape)  # its last axis was taken for E
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError, match=re.escape(f"{shape}, expected a table (N, E)")):
        npbert.load_weights(tmp_path)


def test_a_transposed_word_table_shows_in_the_message(tmp_path):
    tensors = renamed(lambda k: k)
    word = "bert.embeddings.word_embeddings.weight"
    tensors[word] = np.ascontiguousarray(tensors[word].T)  # (E, V): the position table was blamed
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError, match=re.escape(f"({word} is (32, 87): (V, E))")):
        npbert.load_weights(tmp_path)


def test_a_word_table_kept_only_as_its_tied_output_head_is_named(tmp_path):
    word = "bert.embeddings.word_embeddings.weight"
    head = "cls.predictions.decoder.weight"
    make_checkpoint(tmp_path, renamed(lambda k: head if k == word else k))
    message = f"has no embeddings.word_embeddings.weight, only {head}, an output head"
    with pytest.raises(InputError, match=re.escape(message)):
        npbert.load_weights(tmp_path)


def test_tensor_shapes_that_disagree_are_refused(tmp_path):
    tensors = renamed(lambda k: k)
    tensors["bert.embeddings.LayerNorm.beta"] = np.zeros(31, np.float32)
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError, match=r"LayerNorm.beta has shape \(31,\), expected \(32,\)"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(
    ("name", "shape", "message"),
    [
        ("token_type_embeddings", (0, 32), r"has shape \(0, 32\): it is empty"),
        ("position_embeddings", (512, 0), r"has shape \(512, 0\): it is empty"),
        ("token_type_embeddings", (2, 31), r"has shape \(2, 31\), expected \(N, 32\) from"),
    ],
)
def test_an_empty_or_narrow_table_is_refused_as_such(tmp_path, name, shape, message):
    tensors = renamed(lambda k: k)
    tensors[f"bert.embeddings.{name}.weight"] = np.zeros(shape, np.float32)
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_tensors_of_other_dtypes_are_refused_with_the_dtypes_npbert_reads(tmp_path, dtype):
    tensors = renamed(lambda k: k)
    name = "bert.embeddings.word_embeddings.weight"
    tensors[name] = tensors[name].astype(dtype)
    make_checkpoint(tmp_path, tensors)
    stored = {np.float64: "F64", np.int32: "I32"}[dtype]
    message = f"{tmp_path / 'model.safetensors'}: {name} is {stored}; npbert reads embedding"
    with pytest.raises(InputError, match=re.escape(message) + " tensors stored as F32, F16, BF16"):
        npbert.load_weights(tmp_path)


def test_layer_norm_eps_comes_from_config(tmp_path):
    make_checkpoint(tmp_path, renamed(lambda k: k), {"layer_norm_eps": 1e-5})
    assert npbert.load_weights(tmp_path).config.layer_norm_eps == 1e-5


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: (d / "config.json").unlink(), "has no config.json"),
        (lambda d: (d / "config.json").write_text("{oops"), "not valid JSON"),
        (lambda d: (d / "model.safetensors").unlink(), "has no model.safetensors"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 7), "not a valid safetensors"),
    ],
    ids=["no-config", "bad-config", "no-weights", "corrupt-weights"],
)
def test_broken_checkpoints_give_clear_errors(tmp_path, setup, message):
    make_checkpoint(tmp_path, renamed(lambda k: k))
    setup(tmp_path)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


def test_missing_embedding_tensor_is_named(tmp_path):
    tensors = renamed(lambda k: k)
    del tensors["bert.embeddings.token_type_embeddings.weight"]
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError, match=r"needs the tensor bert\.embeddings\.token_type"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda w: {"word_embeddings": w.word_embeddings[:50]}, "(50, 32) float32, but the"),
        (lambda w: {"position_embeddings": w.position_embeddings[:2]}, "asks for (128, 32)"),
        (lambda w: {"token_type_embeddings": None}, "token_type_embeddings is None, but"),
        (lambda w: {"layer_norm_weight": None}, "layer_norm_weight is None, but"),
        (lambda w: {"projection_weight": np.zeros((4, 32), np.float32)}, "asks for none"),
        (lambda w: {"word_embeddings": w.word_embeddings.astype(np.float64)}, "float64, but"),
        (lambda w: {"word_embeddings": w.word_embeddings.tolist()}, "word_embeddings is list"),
    ],
)
def test_weights_that_disagree_with_their_config_are_refused(change, message):
    # The fast path clips ids to the table: a short table would give the last row silently.
    import dataclasses

    weights = npbert.load_weights(TINY)
    with pytest.raises(InputError, match="EmbeddingWeights: ") as caught:
        dataclasses.replace(weights, **change(weights))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("name", "field", "message"),
    [  # BERT without beta computed another layer; ALBERT without its projection's bias failed
        # in the fast path alone; DeBERTa's projection (no bias in its model) ignored one
        ("tiny-bert", "layer_norm_bias", "layer_norm_bias is None, but the config (bert) asks"),
        ("tiny-albert", "projection_bias", "projection_bias is None, but the config (albert)"),
        ("tiny-electra", "projection_bias", "projection_bias is None, but the config (electra)"),
        ("tiny-deberta-v2", "projection_bias", "projection_bias is (32,) float32, but the config"),
    ],
)
def test_a_bias_the_family_has_is_needed_and_one_it_has_not_refused(name, field, message):
    import dataclasses

    from conftest import DATA

    weights = npbert.load_weights(DATA / name)
    value = None if getattr(weights, field) is not None else np.zeros(32, np.float32)
    with pytest.raises(InputError, match=re.escape(message)):
        dataclasses.replace(weights, **{field: value})


def test_modernbert_may_have_no_layer_norm_bias():
    import dataclasses

    from conftest import DATA

    weights = npbert.load_weights(DATA / "tiny-modernbert")
    assert dataclasses.replace(weights, layer_norm_bias=None).layer_norm_bias is None


def test_weights_that_can_be_written_are_copied_so_an_edit_cannot_go_stale():
    import dataclasses

    weights = npbert.load_weights(TINY)
    assert dataclasses.replace(weights).word_embeddings is weights.word_embeddings  # mapped
    table = weights.word_embeddings.copy()
    edited = dataclasses.replace(weights, word_embeddings=table)
    before = npbert.embed(edited, [2, 5, 3])
    table[5] += 1.0  # the caller's array, after the fact
    np.testing.assert_array_equal(npbert.embed(edited, [2, 5, 3]), before)
    with pytest.raises(ValueError, match="WRITEABLE"):
        edited.word_embeddings.flags.writeable = True


def _marked_read_only_over(owner: str, table: np.ndarray) -> tuple:
    """(array, write): `table`'s values in an array marked read-only whose memory its owner,
    a writable bytearray or as_strided's object, can still change; write(row, value)."""
    if owner == "bytearray":
        memory = bytearray(table.tobytes())
        array = np.frombuffer(memory, np.float32)
        values = np.frombuffer(memory, np.float32).reshape(table.shape)
    else:
        values = table.copy()
        array = np.lib.stride_tricks.as_strided(values, writeable=False)
    array.flags.writeable = False

    def write(row, value):
        values[row] = value

    return array.reshape(table.shape), write


@pytest.mark.parametrize("owner", ["bytearray", "as_strided"])
def test_an_array_marked_read_only_over_writable_memory_is_copied(owner):
    import dataclasses

    weights = npbert.load_weights(TINY)
    table, write = _marked_read_only_over(owner, weights.position_embeddings)
    edited = dataclasses.replace(weights, position_embeddings=table)
    before = npbert.embed(edited, [2, 5, 3])  # npbert.layer.fast makes its tables from them, once
    write(1, 3.0)  # the memory under the caller's array, after the fact
    # The weights hold a copy, so they and npbert.layer.fast's tables still agree
    readable = npbert.embed_stages(edited, [2, 5, 3])["embeddings"]
    np.testing.assert_allclose(readable, before, rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", ["tiny-bert-fp16", "tiny-bert-bf16"])
def test_widened_weights_cannot_be_made_writable_again(name):
    weights = npbert.load_weights(DATA / name)
    for array in weights.arrays.values():
        with pytest.raises(ValueError, match="WRITEABLE"):
            array.flags.writeable = True


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-bert-fp16", "tiny-albert"])
@pytest.mark.parametrize("copied", ["pickle", "deepcopy"])
def test_weights_sent_to_another_process_stay_read_only(name, copied):
    """multiprocessing, joblib and Ray pickle the weights: they came back writable, and an
    edit in place left npbert.layer.fast's tables stale (embed 2.48 from embed_stages)."""
    import copy
    import pickle

    weights = npbert.load_weights(DATA / name)
    other = pickle.loads(pickle.dumps(weights)) if copied == "pickle" else copy.deepcopy(weights)
    assert other.config == weights.config and other.files == weights.files
    for field, array in other.arrays.items():
        np.testing.assert_array_equal(array, weights.arrays[field])
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
    np.testing.assert_array_equal(npbert.embed(other, [2, 5, 3]), npbert.embed(weights, [2, 5, 3]))


def test_both_a_legacy_and_a_current_name_are_refused_as_unclear(tmp_path):
    tensors = renamed(lambda k: k)
    tensors["bert.embeddings.LayerNorm.weight"] = np.full(32, 3.0, np.float32)
    make_checkpoint(tmp_path, tensors)
    with pytest.raises(InputError) as caught:
        npbert.load_weights(tmp_path)
    names = "bert.embeddings.LayerNorm.weight and bert.embeddings.LayerNorm.gamma"
    assert f"has both {names}" in str(caught.value)


def test_scan_values_counts_nan_and_inf_and_where_the_first_is(tmp_path):
    from npbert.loading.checkpoint import locate_checkpoint, scan_values

    tensors = load_file(str(TINY / "model.safetensors"))
    words = tensors["bert.embeddings.word_embeddings.weight"]
    largest = float(np.abs(words).max())
    words[7, 3] = words[9, 0] = np.nan
    words[11, 5] = -np.inf
    make_checkpoint(tmp_path, tensors)
    _, stored = locate_checkpoint(tmp_path)
    # 4 rows at a time: the first bad row and the counts are found across the chunks
    assert scan_values(stored["word_embeddings"], rows=4) == "2 NaN, 1 Inf (first in row 7)"
    assert scan_values(stored["layer_norm_weight"]).startswith("finite, |x| <= ")
    _, tiny = locate_checkpoint(TINY)
    assert scan_values(tiny["word_embeddings"], rows=4) == f"finite, |x| <= {largest:.3g}"
    _, bf16 = locate_checkpoint(DATA / "tiny-bert-bf16")  # widened before it is scanned
    assert scan_values(bf16["word_embeddings"]).startswith("finite, |x| <= ")


@pytest.mark.parametrize("kind", ["directory", "dangling link"])
def test_weights_that_are_not_a_regular_file_are_named_so(tmp_path, kind):
    """It was 'has no model.safetensors', with model.safetensors right there."""
    shutil.copy(TINY / "config.json", tmp_path / "config.json")
    weights = tmp_path / "model.safetensors"
    if kind == "directory":
        weights.mkdir()
    else:
        weights.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match=re.escape(f"{weights} is not a regular file")):
        npbert.load_weights(tmp_path)
