"""config.json and the index: every field npbert uses is checked, every refusal names why."""

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest
from conftest import TINY
from safetensors.numpy import load_file, save_file

import npbert
from npbert import InputError
from npbert.layer.families import FAMILIES, REFUSED


def checkpoint(tmp_path, changes=None, *, config=False, rename=None):
    """tiny-bert with config.json changed (a key set to None is removed) or replaced."""
    raw = json.loads((TINY / "config.json").read_text())
    for key, value in (changes or {}).items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (tmp_path / "config.json").write_text(json.dumps(raw if config is False else config))
    shutil.copy(TINY / "vocab.txt", tmp_path / "vocab.txt")
    tensors = load_file(str(TINY / "model.safetensors"))
    if rename:
        tensors = {rename(k): v for k, v in tensors.items()}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


@pytest.mark.parametrize(
    "eps", [float("nan"), -1.0, 0, float("-inf"), float("inf"), 1e300, 1.0, True, "1e-12", [0.1]]
)
def test_layer_norm_eps_must_be_a_small_positive_number(tmp_path, eps):
    checkpoint(tmp_path, {"layer_norm_eps": eps})  # json writes nan and inf as NaN, Infinity
    with pytest.raises(InputError, match=r"layer_norm_eps is .*above 0 and below 1"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("eps", [1e-45, 1e-46, 2.0**-151, 5e-324])
def test_layer_norm_eps_below_float32s_smallest_number_is_refused(tmp_path, eps):
    """Refused "which float32 rounds to 0", untrue of 1e-45 (1.4e-45 in float32)."""
    checkpoint(tmp_path, {"layer_norm_eps": eps})
    message = r"layer_norm_eps is .*, below float32's smallest positive number: .* 1.4e-45"
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


def test_layer_norm_eps_of_float32s_smallest_is_taken(tmp_path):
    weights = npbert.load_weights(checkpoint(tmp_path, {"layer_norm_eps": 2.0**-149}))
    assert np.float32(weights.config.layer_norm_eps) > 0


def test_missing_eps_takes_the_familys_default(tmp_path):
    weights = npbert.load_weights(checkpoint(tmp_path, {"layer_norm_eps": None}))
    assert weights.config.layer_norm_eps == 1e-12


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([1, 2], "must hold a JSON object, not list"),
        (None, "must hold a JSON object, not NoneType"),
        ("bert", "must hold a JSON object, not str"),
    ],
)
def test_config_that_is_not_an_object_is_refused(tmp_path, config, message):
    checkpoint(tmp_path, config=config)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pad_token_id": -1}, "pad_token_id is -1; it must be a non-negative integer"),
        ({"pad_token_id": "0"}, "pad_token_id is '0'"),
        ({"pad_token_id": [0]}, r"pad_token_id is \[0\]"),
        ({"pad_token_id": True}, "pad_token_id is True"),
        ({"pad_token_id": 87}, "pad_token_id 87 is past the vocabulary"),
        ({"vocab_size": "87"}, "vocab_size is '87'"),
        ({"vocab_size": 87.0}, "vocab_size is 87.0"),
        ({"model_type": 3}, "model_type is 3, not a string"),
        (
            {"model_type": "gpt2"},
            r"model_type 'gpt2' is not supported; npbert implements .*roberta",
        ),
        ({"model_type": "xlm"}, "model_type 'xlm' is refused: XLM adds language embeddings"),
        ({"model_type": "tapas"}, "refused: TAPAS looks up seven token-type tables"),
        ({"model_type": "ernie", "use_task_id": True}, "ernie with use_task_id=True is refused"),
        ({"model_type": "ernie", "use_task_id": 1}, "ernie with use_task_id=1 is refused"),
        (
            {"position_embedding_type": "relative_key"},
            "bert with position_embedding_type='relative_key' is refused: transformers 4 left the "
            "position table out of this layer for any type but 'absolute'",
        ),
    ],
)
def test_bad_config_fields_are_refused_by_name(tmp_path, changes, message):
    rename = (lambda k: "ernie." + k.removeprefix("bert.")) if "use_task_id" in changes else None
    checkpoint(tmp_path, changes, rename=rename)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


def test_a_null_position_embedding_type_is_refused_as_unclear(tmp_path):
    """transformers 4 read null as a type other than 'absolute', and left the table out."""
    config = json.loads((TINY / "config.json").read_text()) | {"position_embedding_type": None}
    checkpoint(tmp_path, config=config)
    with pytest.raises(InputError, match="position_embedding_type=None is refused"):
        npbert.load_weights(tmp_path)


NOMIC = TINY.parent / "tiny-nomic-bert"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rotary_emb_fraction": 0.0}, "rotary_emb_fraction=0.0 is refused: without rotary"),
        ({"rotary_emb_fraction": 0}, "rotary_emb_fraction=0 is refused"),
        ({"rotary_emb_fraction": -1.0}, "rotary_emb_fraction=-1.0 is refused"),
        ({"rotary_emb_fraction": "1.0"}, "rotary_emb_fraction='1.0' is refused"),
        ({"rotary_emb_fraction": True}, "rotary_emb_fraction=True is refused"),
        ({"rotary_emb_fraction": None}, r"no rotary_emb_fraction \(default 0.0\) is refused"),
    ],
)
def test_nomic_bert_settings_that_change_the_layer_are_refused(tmp_path, changes, message):
    """NomicBertConfig's default is rotary_emb_fraction=0.0 (a learned position table, which
    npbert does not read): config.json's silence means that."""
    shutil.copytree(NOMIC, tmp_path, dirs_exist_ok=True)
    raw = json.loads((NOMIC / "config.json").read_text())
    raw = {key: value for key, value in (raw | changes).items() if value is not None}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("changes", [{"rotary_emb_fraction": 0.5}, {"prenorm": True}, {}])
def test_nomic_bert_with_rotary_positions_loads_pre_or_post_norm(tmp_path, changes):
    """prenorm was refused as if emb_ln moved into the first layer: in nomic's code
    (NomicBertModel.forward) emb_ln(W + T) comes first either way, and prenorm changes the
    blocks after it."""
    shutil.copytree(NOMIC, tmp_path, dirs_exist_ok=True)
    raw = json.loads((NOMIC / "config.json").read_text())
    raw.pop("prenorm")  # False by default
    (tmp_path / "config.json").write_text(json.dumps(raw | changes))
    ids = np.array([[1, 2, 3]])
    expected = npbert.embed(npbert.load_weights(NOMIC), ids)
    np.testing.assert_array_equal(npbert.embed(npbert.load_weights(tmp_path), ids), expected)


NOMIC_TRANSFORMERS = TINY.parent / "tiny-nomic-bert-transformers"


def test_nomic_bert_in_transformers_layout_has_transformers_defaults(tmp_path):
    """transformers' NomicBertConfig: layer_norm_eps (default 1e-12, not nomic's 1e-5), and
    nomic's own keys, which its code never reads, change nothing."""
    shutil.copytree(NOMIC_TRANSFORMERS, tmp_path, dirs_exist_ok=True)
    raw = json.loads((NOMIC_TRANSFORMERS / "config.json").read_text())
    assert npbert.load_weights(tmp_path).config.layer_norm_eps == raw["layer_norm_eps"] != 1e-12
    del raw["layer_norm_eps"]
    silent = raw | {"rotary_emb_fraction": 0.0, "prenorm": True, "layer_norm_epsilon": 0.1}
    (tmp_path / "config.json").write_text(json.dumps(silent))
    config = npbert.load_weights(tmp_path).config
    assert (config.layer_norm_eps, config.max_length) == (1e-12, raw["max_position_embeddings"])


def test_nomic_bert_config_mixing_both_layouts_is_refused(tmp_path):
    shutil.copytree(NOMIC, tmp_path, dirs_exist_ok=True)
    raw = json.loads((NOMIC / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | {"hidden_size": raw["n_embd"]}))
    with pytest.raises(InputError, match=r"both n_embd and hidden_size is refused: .* two layouts"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(("name", "key"), [("modernbert", "max_position_embeddings"),
                                           ("nomic-bert", "n_positions")])  # fmt: skip
def test_a_rotary_model_whose_limit_is_zero_is_refused(tmp_path, name, key):
    # Without a position table the config's limit is the only one: 0 would fit no text.
    source = TINY.parent / f"tiny-{name}"
    shutil.copytree(source, tmp_path, dirs_exist_ok=True)
    raw = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | {key: 0}))
    with pytest.raises(InputError, match=f"{key} is 0: no text would fit"):
        npbert.load_weights(tmp_path)


def test_every_refused_model_type_says_why():
    assert set(REFUSED) >= {"xlm", "tapas", "layoutlm"}
    assert not set(REFUSED) & set(FAMILIES)


def test_without_model_type_bert_tensors_load_as_bert(tmp_path):
    weights = npbert.load_weights(checkpoint(tmp_path, {"model_type": None}))
    assert weights.config.model_type == "bert"


def _bare(name: str) -> str:
    return name.removeprefix("bert.")


def test_without_model_type_bare_bert_tensors_load_as_bert_where_architectures_say_so(tmp_path):
    checkpoint(tmp_path, {"model_type": None, "architectures": ["BertModel"]}, rename=_bare)
    assert npbert.load_weights(tmp_path).config.model_type == "bert"


@pytest.mark.parametrize(
    ("changes", "rename", "message"),
    [  # RoBERTa's bare tensors have BERT's names: read as BERT, its positions were wrong
        ({"architectures": ["RobertaForMaskedLM"]}, _bare, "architectures (['RobertaForMaskedLM'"),
        ({"architectures": ["RobertaModel"]}, None, "are not BERT's"),
        ({"architectures": []}, _bare, "its architectures ([]) are not BERT's"),
        ({}, _bare, "with no bert. prefix and no architectures, could be any family's"),
    ],
)
def test_without_model_type_what_could_be_another_family_is_refused(
    tmp_path, changes, rename, message
):
    checkpoint(tmp_path, {"model_type": None, **changes}, rename=rename)
    with pytest.raises(InputError, match=re.escape(message)):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("name", ["tiny-roformer", "tiny-modernbert"])
def test_a_relative_position_type_is_no_reason_to_refuse_a_layer_without_positions(tmp_path, name):
    """Refused "(transformers 4 skipped them for relative types)": there is no table to skip."""
    from conftest import DATA

    shutil.copytree(DATA / name, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["position_embedding_type"] = "relative_key"
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    ids = np.array([[1, 2, 3]])
    expected = npbert.embed(npbert.load_weights(DATA / name), ids)
    np.testing.assert_array_equal(npbert.embed(npbert.load_weights(tmp_path / "m"), ids), expected)


def test_without_model_type_bert_is_checked_as_bert_is(tmp_path):
    checkpoint(tmp_path, {"model_type": None, "position_embedding_type": "relative_key"})
    with pytest.raises(InputError, match="position_embedding_type='relative_key' is refused"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize(
    "name",
    ["tiny-longformer", "tiny-big-bird", "tiny-squeezebert", "tiny-distilbert", "tiny-mpnet",
     "tiny-deberta", "tiny-deberta-v2"],
)  # fmt: skip
def test_a_position_type_the_family_never_read_changes_nothing(tmp_path, name):
    """It was refused in every family with a position table, as BERT's must be; but
    transformers 4's Longformer and BigBird stored the key and added the table whatever it
    said, the others never read it, and transformers 5 reads it nowhere."""
    from conftest import DATA

    shutil.copytree(DATA / name, tmp_path / "m")
    ids = np.array([[1, 2, 3]])
    expected = npbert.embed(npbert.load_weights(DATA / name), ids)
    for kind in ("relative_key", None):
        config = json.loads((DATA / name / "config.json").read_text())
        config["position_embedding_type"] = kind
        (tmp_path / "m" / "config.json").write_text(json.dumps(config))
        embedded = npbert.embed(npbert.load_weights(tmp_path / "m"), ids)
        np.testing.assert_array_equal(embedded, expected)


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-roberta", "tiny-distilbert", "tiny-funnel"])
def test_an_embedding_size_the_family_never_reads_changes_nothing(tmp_path, name):
    """A stray embedding_size (left by a conversion tool) was held to the tables' width in
    every family; only ALBERT, ELECTRA, RoFormer, DeBERTa and SqueezeBERT read it."""
    from conftest import DATA

    shutil.copytree(DATA / name, tmp_path / "m")
    config = json.loads((DATA / name / "config.json").read_text()) | {"embedding_size": 3}
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    ids = np.array([[1, 2, 3]])
    expected = npbert.embed(npbert.load_weights(DATA / name), ids)
    np.testing.assert_array_equal(npbert.embed(npbert.load_weights(tmp_path / "m"), ids), expected)
    for reader in ("tiny-electra", "tiny-squeezebert"):  # SqueezeBERT's has no projection
        config = json.loads((DATA / reader / "config.json").read_text())
        shutil.copytree(DATA / reader, tmp_path / reader)
        (tmp_path / reader / "config.json").write_text(json.dumps(config | {"embedding_size": 3}))
        with pytest.raises(InputError, match="embedding_size is 3, but the tensors have"):
            npbert.load_weights(tmp_path / reader)


@pytest.mark.parametrize("rescale", [True, False])
def test_without_model_type_a_big_bird_config_is_not_read_as_berts(tmp_path, rescale):
    """BigBird saves its tensors under bert.: its rescale_embeddings, read as BERT, was lost."""
    checkpoint(tmp_path, {"model_type": None, "architectures": None, "rescale_embeddings": rescale})
    message = "has no model_type and it has rescale_embeddings, which big_bird's layer reads"
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("prefix", ["roberta.", "distilbert."])
def test_without_model_type_other_tensors_are_refused(tmp_path, prefix):
    checkpoint(tmp_path, {"model_type": None}, rename=lambda k: prefix + k.removeprefix("bert."))
    with pytest.raises(InputError, match="has no model_type and its tensors are not BERT's"):
        npbert.load_weights(tmp_path)


def test_a_roberta_config_on_bert_tensors_is_refused(tmp_path):
    checkpoint(tmp_path, {"model_type": "roberta"})
    with pytest.raises(InputError, match=r"'roberta' keeps its word table in .*disagree"):
        npbert.load_weights(tmp_path)


def test_a_bert_checkpoint_called_roberta_gets_roberta_positions(tmp_path):
    # Same tensor names without a prefix: the config decides, and RoBERTa numbers positions
    # from padding_idx + 1, so its output differs from BERT's for the same ids.
    directory = checkpoint(tmp_path, {"model_type": "roberta", "pad_token_id": 1}, rename=strip)
    weights = npbert.load_weights(directory)
    assert weights.config.positions == "padded" and weights.config.padding_idx == 1
    assert weights.config.max_length == 128 - 2
    ids = np.array([[5, 6, 7, 1, 1]])
    stages = npbert.embed_stages(weights, ids)
    expected = weights.position_embeddings[[2, 3, 4, 1, 1]]
    np.testing.assert_array_equal(stages["position"][0], expected)


def strip(name: str) -> str:
    return name.removeprefix("bert.")


WORD = "bert.embeddings.word_embeddings.weight"


def write_index(tmp_path, weight_map):
    checkpoint(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "shard.safetensors")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(weight_map))


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ([], "must hold a JSON object, not list"),
        ({"metadata": {}}, "has no weight_map object"),
        ({"weight_map": ["x"]}, "has no weight_map object"),
        ({"weight_map": {WORD: 3}}, "is in 3, not a file"),
        ({"weight_map": {WORD: "../x.safetensors"}}, "not a file of this directory"),
        ({"weight_map": {WORD: "/tmp/x.safetensors"}}, "not a file of this directory"),
    ],
)
def test_bad_indexes_are_refused(tmp_path, index, message):
    write_index(tmp_path, index)
    with pytest.raises(InputError, match=message):
        npbert.load_weights(tmp_path)


def test_invalid_index_json_is_refused(tmp_path):
    write_index(tmp_path, {})
    (tmp_path / "model.safetensors.index.json").write_text("{oops")
    with pytest.raises(InputError, match="is not valid JSON"):
        npbert.load_weights(tmp_path)


# Valid JSON that Python will not read: json.loads raises ValueError and RecursionError
HUGE_INTEGER = '{"total_size": ' + "9" * 5000 + "}"
DEEP = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("config.json", HUGE_INTEGER, "value has 5000 digits"),
        ("config.json", DEEP, "nested too deeply"),
        ("model.safetensors.index.json", HUGE_INTEGER, "value has 5000 digits"),
        ("model.safetensors.index.json", DEEP, "nested too deeply"),
    ],
)
def test_json_that_python_will_not_read_is_refused_in_one_line(tmp_path, name, text, problem):
    write_index(tmp_path, {})
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as refused:
        npbert.load_weights(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / name} is not valid JSON: ")
    assert message.endswith(problem)


def test_an_index_that_lies_about_a_shard_is_refused(tmp_path):
    names = load_file(str(TINY / "model.safetensors"))
    weight_map = dict.fromkeys(names, "shard.safetensors")
    weight_map[WORD] = "other.safetensors"
    write_index(tmp_path, {"weight_map": weight_map})
    save_file({"x": np.zeros(1, np.float32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(InputError, match=rf"puts {WORD} in other"):
        npbert.load_weights(tmp_path)


def electra(tmp_path, config: dict, *, projected: bool = True):
    """A bare ELECTRA at ElectraConfig's default sizes (E 128, H 256), config.json as given."""
    rng = np.random.default_rng(0)
    tensors = {
        "embeddings.word_embeddings.weight": rng.normal(size=(10, 128)),
        "embeddings.position_embeddings.weight": rng.normal(size=(8, 128)),
        "embeddings.token_type_embeddings.weight": rng.normal(size=(2, 128)),
        "embeddings.LayerNorm.weight": rng.normal(size=128),
        "embeddings.LayerNorm.bias": rng.normal(size=128),
    }
    if projected:
        tensors["embeddings_project.weight"] = rng.normal(size=(256, 128))
        tensors["embeddings_project.bias"] = rng.normal(size=256)
    tensors = {name: array.astype(np.float32) for name, array in tensors.items()}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "electra", **config}))
    return tmp_path


@pytest.mark.parametrize("config", [{}, {"hidden_size": 256}, {"embedding_size": 128}])
def test_a_projection_follows_the_models_default_sizes_where_config_is_silent(tmp_path, config):
    weights = npbert.load_weights(electra(tmp_path, config))  # transformers: E 128, H 256
    assert weights.config.projection == "after" and weights.config.hidden_size == 256
    assert npbert.embed(weights, [[1, 2, 3]], project=True).shape == (1, 3, 256)


def test_default_sizes_that_ask_for_a_projection_the_tensors_lack_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"embeddings_project\.weight"):
        npbert.load_weights(electra(tmp_path, {}, projected=False))


def test_an_explicit_null_pad_id_is_not_replaced_by_the_default(tmp_path):
    # transformers' RobertaEmbeddings fails on it; npbert took pad_token_id 1 and went on.
    checkpoint(tmp_path, {"model_type": "roberta", "pad_token_id": None}, rename=strip)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "pad_token_id" not in raw  # absent: RoBERTa's default, 1
    assert npbert.load_weights(tmp_path).config.padding_idx == 1
    (tmp_path / "config.json").write_text(json.dumps({**raw, "pad_token_id": None}))
    with pytest.raises(InputError, match="pad_token_id is null or missing; this model's"):
        npbert.load_weights(tmp_path)


@pytest.mark.parametrize("family", ["funnel", "distilbert", "modernbert", "mpnet"])
def test_a_type_vocab_size_is_not_checked_where_the_layer_has_no_token_types(tmp_path, family):
    # funnel-transformer's configs state 3, which its attention uses: a valid checkpoint.
    from conftest import DATA

    shutil.copytree(DATA / f"tiny-{family}", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "type_vocab_size": 3}))
    weights = npbert.load_weights(tmp_path / "m")
    assert weights.config.type_vocab_size == 0 and weights.token_type_embeddings is None


TINY_ROBERTA = TINY.parent / "tiny-roberta"


@pytest.mark.parametrize(
    ("checkpoint_dir", "change", "message"),
    [
        # was a silent wrong result: positions past the table read the next token type's rows
        (TINY, {"max_length": 500}, "max_length is 500; the position table gives 128 positions"),
        (TINY, {"max_length": None}, "max_length is None"),
        (TINY_ROBERTA, {"max_length": 65}, "max_length is 65; the position table gives 64"),
        (TINY, {"layer_norm_eps": float("nan")}, "layer_norm_eps is nan; it must be a number"),
        (TINY, {"layer_norm_eps": -1.0}, "layer_norm_eps is -1.0; it must be a number"),
        (TINY, {"layer_norm_eps": 0.0}, "layer_norm_eps is 0.0"),
        (TINY, {"model_type": "foo"}, "model_type 'foo' is not supported"),
        (TINY, {"model_type": "roberta"}, "positions is 'absolute'; roberta with"),
        (TINY, {"positions": "padded"}, "positions is 'padded'; bert with"),
        (TINY_ROBERTA, {"padding_idx": None}, "padding_idx is None, with 'padded' positions"),
        (TINY, {"padding_idx": 1}, "padding_idx is 1, with 'absolute' positions"),
        (TINY, {"vocab_size": 0}, "vocab_size is 0; it must be an integer >= 1"),
        (TINY.parent / "tiny-roformer", {"max_length": 0}, "max_length is 0; it must be an inte"),
        (TINY, {"type_vocab_size": 2.0}, "type_vocab_size is 2.0; it must be an integer"),
        (TINY, {"pad_token_id": -1}, "pad_token_id is -1; it must be an integer >= 0"),
        (TINY, {"pad_token_id": 10**6}, "pad_token_id 1000000 is past the vocabulary"),
        (TINY, {"projection": "after"}, "projection is 'after', not None"),
        (TINY, {"word_scale": float("inf")}, "word_scale is inf, not a positive number"),
        (TINY, {"sinusoidal": 1}, "sinusoidal is 1, not True or False"),
    ],
)
def test_a_config_changed_in_code_is_checked_as_config_json_is(checkpoint_dir, change, message):
    config = npbert.load_weights(checkpoint_dir).config
    with pytest.raises(InputError, match=re.escape(f"EmbeddingConfig: {message}")):
        dataclasses.replace(config, **change)


def test_a_config_changed_within_its_rules_embeds_as_its_rules_say(tmp_path):
    weights = npbert.load_weights(TINY)
    shorter = dataclasses.replace(weights.config, max_length=4, layer_norm_eps=1e-5)
    edited = dataclasses.replace(weights, config=shorter)
    with pytest.raises(InputError, match="5 tokens"):
        npbert.embed(edited, np.arange(5))
    stated = checkpoint(tmp_path, {"layer_norm_eps": 1e-5})
    np.testing.assert_array_equal(
        npbert.embed(edited, np.arange(4)), npbert.embed(npbert.load_weights(stated), np.arange(4))
    )


def test_the_formula_is_the_checkpoints_with_config_json_choices_made():
    """config.formula (what explain, inspect and the vectors' manifest show) leaves out what
    this checkpoint does not compute; the family's formula says when each part applies."""
    config = {name: npbert.load_weights(TINY.parent / f"tiny-{name}").config for name in
              ("deberta", "deberta-v2", "big-bird", "electra", "bert")}  # fmt: skip
    assert config["deberta"].formula == "LayerNorm((W + P) + T) * attention_mask"  # E = H
    assert config["deberta-v2"].formula == "LayerNorm(embed_proj(W)) * attention_mask"
    projected = dataclasses.replace(config["deberta"], type_vocab_size=0)
    assert projected.formula == "LayerNorm(W + P) * attention_mask"
    big_bird = config["big-bird"]
    assert big_bird.formula == "LayerNorm((W * sqrt(H) + T) + P)" and big_bird.word_scale > 1
    assert dataclasses.replace(big_bird, word_scale=1.0).formula == "LayerNorm((W + T) + P)"
    electra = config["electra"]
    assert electra.formula.endswith("at width E, then Linear(E -> H)")
    unprojected = dataclasses.replace(electra, projection=None, hidden_size=electra.embedding_size)
    assert unprojected.formula == "LayerNorm((W + T) + P) at width E"
    assert config["bert"].formula == config["bert"].family.formula == "LayerNorm((W + T) + P)"
    for name in ("deberta-v2", "big_bird", "electra"):
        assert " if " in FAMILIES[name].formula  # the family's says what decides each part


@pytest.mark.parametrize(
    "name, key, default",
    [  # the model's config class's default for the key, as transformers (or nomic) sets it
        ("tiny-roformer", "max_position_embeddings", 1536),
        ("tiny-modernbert", "max_position_embeddings", 8192),
        ("tiny-deberta-v2", "max_position_embeddings", 512),
        ("tiny-nomic-bert-transformers", "max_position_embeddings", 2048),
        ("tiny-nomic-bert", "n_positions", 1024),  # nomic's config extends GPT2Config
    ],
)
def test_a_limit_config_json_leaves_out_is_the_models_default(tmp_path, name, key, default):
    """Without a position table, the limit on tokens is the config's; where config.json is
    silent, the model's config class fills in its default, and texts past it were taken."""
    from conftest import DATA

    shutil.copytree(DATA / name, tmp_path / "m")
    config = json.loads((DATA / name / "config.json").read_text())
    del config[key]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert npbert.load_weights(tmp_path / "m").config.max_length == default


def test_funnel_has_no_limit_whatever_config_json_says(tmp_path):
    """Funnel's model takes texts of any length, and its config has no key for a limit."""
    from conftest import DATA

    shutil.copytree(DATA / "tiny-funnel", tmp_path / "m")
    config = json.loads((DATA / "tiny-funnel" / "config.json").read_text())
    config["max_position_embeddings"] = 8  # a stray key: FunnelConfig has none
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    weights = npbert.load_weights(tmp_path / "m")
    assert weights.config.max_length is None
    assert npbert.embed(weights, np.ones((1, 20), np.int64)).shape[:2] == (1, 20)
