"""npbert against torch's BertEmbeddings: goldens written by scripts/make_goldens.py."""

import hashlib

import numpy as np
import pytest
from conftest import golden_dir, golden_names, load_golden

import npbert

LOOKUPS = ("word", "position", "token_type")
SEED_IDS = {  # the seeds' own tokenizations (bert-base-uncased vocabulary)
    "The quick brown fox jumps over the lazy dog": [
        101,
        1996,
        4248,
        2829,
        4419,
        14523,
        2058,
        1996,
        13971,
        3899,
        102,
    ],
    "I am Sinan": [101, 1045, 2572, 8254, 2319, 102],
    "this is a test sentence": [101, 2023, 2003, 1037, 3231, 6251, 102],
}
_weights = {}


def weights_for(metadata, minilm_dir):
    directory = golden_dir(metadata, minilm_dir)
    if directory not in _weights:
        _weights[directory] = npbert.load_weights(directory)
    return _weights[directory]


@pytest.fixture(params=golden_names())
def golden(request, minilm_dir):
    arrays, metadata = load_golden(request.param)
    return request.param, arrays, metadata, weights_for(metadata, minilm_dir)


def stages_of(arrays, weights, dtype=np.float32):
    return npbert.embed_stages(
        weights, arrays["input_ids"], arrays["token_type_ids"], arrays["position_ids"], dtype=dtype
    )


def test_golden_made_from_these_weights(golden, minilm_dir):
    _, _, metadata, _ = golden
    path = golden_dir(metadata, minilm_dir) / "model.safetensors"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == metadata["weights_sha256"]


def test_lookups_and_sum_bit_identical_to_torch(golden):
    name, arrays, _, weights = golden
    stages = stages_of(arrays, weights)
    for stage in (*LOOKUPS, "sum"):
        assert stages[stage].dtype == arrays[stage].dtype == np.float32
        np.testing.assert_array_equal(stages[stage], arrays[stage], err_msg=f"{name}: {stage}")


def test_output_within_1e_5_of_torch(golden, record):
    name, arrays, _, weights = golden
    output = npbert.embed(
        weights, arrays["input_ids"], arrays["token_type_ids"], arrays["position_ids"]
    )
    assert output.shape == arrays["embeddings"].shape and output.dtype == np.float32
    diff = float(np.abs(output - arrays["embeddings"]).max())
    record(f"{name}: max |npbert - torch| float32 = {diff:.3g}")
    assert diff <= 1e-5


def test_float64_reference_within_1e_12_of_torch_float64(golden, record):
    name, arrays, _, weights = golden
    output = stages_of(arrays, weights, dtype=np.float64)["embeddings"]
    assert output.dtype == np.float64
    diff = float(np.abs(output - arrays["embeddings_float64"]).max())
    record(f"{name}: max |npbert - torch| float64 = {diff:.3g}")
    assert diff <= 1e-12


def test_normalized_stage_matches_torch(golden):
    _, arrays, _, weights = golden
    np.testing.assert_allclose(
        stages_of(arrays, weights)["normalized"], arrays["normalized"], rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("name", golden_names(text_only=True))
def test_tokenizer_gives_transformers_ids(name, minilm_dir):
    arrays, metadata = load_golden(name)
    embedder = npbert.Embedder.from_pretrained(golden_dir(metadata, minilm_dir))
    texts = metadata.get("texts", metadata.get("text"))
    pair = metadata.get("pair")
    result = embedder(texts, pair, truncation=metadata.get("truncation", False))
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        np.testing.assert_array_equal(getattr(result, key), arrays[key], err_msg=f"{name}: {key}")
    np.testing.assert_allclose(result.embeddings, arrays["embeddings"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("text", SEED_IDS)
def test_seed_sentences_tokenize_as_in_the_seeds(text, minilm_dir):
    result = npbert.Embedder.from_pretrained(minilm_dir)(text)
    assert result.input_ids.tolist() == SEED_IDS[text]
    assert result.token_type_ids.tolist() == [0] * len(SEED_IDS[text])


def test_goldens_cover_the_required_inputs():
    names = set(golden_names())
    for case in ("seed0", "seed1", "seed2", "pair", "padded_batch", "full_length"):
        assert f"minilm_{case}" in names
    arrays, metadata = load_golden("minilm_full_length")
    assert arrays["input_ids"].shape == (512,) and metadata["truncation"] is True
    arrays, _ = load_golden("minilm_pair")
    assert set(arrays["token_type_ids"].ravel().tolist()) == {0, 1}
    arrays, _ = load_golden("minilm_padded_batch")
    assert (arrays["attention_mask"] == 0).any()
