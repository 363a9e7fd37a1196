"""Every family against transformers' own embeddings module, on tiny checkpoints that
transformers wrote (scripts/make_goldens.py; NomicBERT, which transformers lacks, from torch
modules composed as nomic's code composes them)."""

import numpy as np
import pytest
from conftest import TESTS, family_golden_names, load_golden

import npbert
from npbert.families import FAMILIES
from npbert.inputs import prepare_inputs

ARGUMENTS = {"input_ids", "token_type_ids", "position_ids", "mask"}  # as the modules name them
ARGUMENTS_ORDER = ("input_ids", "token_type_ids", "position_ids", "attention_mask")  # npbert's
_weights = {}


def weights_for(metadata):
    directory = TESTS.parent / metadata["model"]
    if directory not in _weights:
        _weights[directory] = npbert.load_weights(directory)
    return _weights[directory]


@pytest.fixture(params=family_golden_names())
def golden(request):
    arrays, metadata = load_golden(request.param)
    weights = weights_for(metadata)
    # The arguments the golden's module was called with, by npbert's names.
    passed = set(metadata["passed"])
    assert passed <= ARGUMENTS, passed
    kwargs = {name: arrays[name] for name in passed - {"mask"}}
    if "mask" in passed:
        kwargs["attention_mask"] = arrays["attention_mask"]
    return request.param, arrays, metadata, weights, kwargs


def test_every_family_has_goldens():
    made = {load_golden(name)[1]["model_type"] for name in family_golden_names()}
    assert made | {"bert"} == set(FAMILIES)  # BERT's: tests/test_goldens.py


def test_config_names_the_family_and_its_settings(golden):
    _, _, metadata, weights, _ = golden
    assert weights.config.model_type == metadata["model_type"]
    assert weights.config.layer_norm_eps == metadata["eps"]


def test_output_within_1e_5_of_transformers(golden, record):
    name, arrays, _, weights, kwargs = golden
    output = npbert.embed(weights, **kwargs)
    diff = float(np.abs(output - arrays["embeddings"]).max())
    record(f"{name}: max |npbert - transformers| float32 = {diff:.3g}")
    assert output.shape == arrays["embeddings"].shape and diff <= 1e-5


def test_projection_is_what_the_first_layer_receives(golden):
    _, arrays, _, weights, kwargs = golden
    if "projected" not in arrays:
        assert weights.config.projection != "after"
        return
    output = npbert.embed(weights, **kwargs, project=True)
    assert output.shape == arrays["projected"].shape
    np.testing.assert_allclose(output, arrays["projected"], rtol=0, atol=1e-5)
    reference = npbert.embed(weights, **kwargs, project=True, dtype=np.float64)
    np.testing.assert_allclose(reference, arrays["projected_float64"], rtol=0, atol=1e-12)


def test_lookups_and_sum_are_bit_identical(golden):
    name, arrays, _, weights, kwargs = golden
    stages = npbert.embed_stages(weights, **kwargs)
    for stage in ("word", "token_type", "position"):
        assert (stage in stages) == (stage in arrays), f"{name}: {stage}"
        if stage in arrays:
            ours = np.broadcast_to(stages[stage], arrays[stage].shape)  # positions may be (L, E)
            np.testing.assert_array_equal(ours, arrays[stage], err_msg=f"{name}: {stage}")
    summed = stages.get("sum", stages["word"])  # one table: nothing is added
    np.testing.assert_array_equal(summed, arrays["sum"], err_msg=f"{name}: sum")


def test_default_positions_and_types_are_the_families(golden):
    _, arrays, _, weights, kwargs = golden
    inputs = prepare_inputs(weights.config, *(kwargs.get(k) for k in ARGUMENTS_ORDER))
    if "position_ids_used" in arrays:
        used = np.broadcast_to(inputs.position_ids, arrays["position_ids_used"].shape)
        np.testing.assert_array_equal(used, arrays["position_ids_used"])
    else:
        assert inputs.position_ids is None
    if "token_type_ids_used" in arrays:
        np.testing.assert_array_equal(inputs.token_type_ids, arrays["token_type_ids_used"])
    else:
        assert inputs.token_type_ids is None


def test_float64_reference_matches_transformers_in_float64(golden, record):
    name, arrays, metadata, weights, kwargs = golden
    output = npbert.embed(weights, **kwargs, dtype=np.float64)
    diff = float(np.abs(output - arrays["embeddings_float64"]).max())
    record(f"{name}: max |npbert - transformers| float64 = {diff:.3g}")
    # DeBERTa v1's own LayerNorm computes in float32 even in a float64 model.
    assert diff <= (1e-6 if metadata["model_type"] == "deberta" else 1e-12)


def test_fast_path_is_close_to_the_specification_and_batch_invariant(golden):
    _, _, _, weights, kwargs = golden
    fast = npbert.embed(weights, **kwargs)
    readable = npbert.embed_stages(weights, **kwargs)["embeddings"]
    np.testing.assert_allclose(fast, readable, rtol=0, atol=2e-6)
    for row in range(fast.shape[0]):
        alone = {k: v[row] for k, v in kwargs.items()}
        np.testing.assert_array_equal(npbert.embed(weights, **alone), fast[row])


@pytest.mark.parametrize("name", family_golden_names(text_only=True))
def test_text_is_tokenized_as_transformers_tokenizes_it(name):
    arrays, metadata = load_golden(name)
    weights = weights_for(metadata)
    texts = metadata.get("texts") or [metadata["text"]]
    pairs = [metadata["pair"]] if "pair" in metadata else None
    embedder = npbert.Embedder.from_pretrained(TESTS.parent / metadata["model"])
    length = metadata.get("max_length", weights.config.max_length)  # the golden's truncation
    cut = bool(metadata.get("truncation"))
    encodings = embedder.tokenizer.encode_batch(texts, pairs, max_length=length, truncation=cut)
    encoding = embedder.tokenizer.pad(encodings)
    np.testing.assert_array_equal(encoding.input_ids, arrays["input_ids"])
    np.testing.assert_array_equal(encoding.attention_mask, arrays["attention_mask"])
    types = arrays.get("token_type_ids", arrays.get("tokenizer_token_type_ids"))
    if types is not None:
        np.testing.assert_array_equal(encoding.token_type_ids, types)
    np.testing.assert_allclose(embedder.embed(encoding), arrays["embeddings"], rtol=0, atol=1e-5)
