"""Bad ids get a clear InputError naming the value and where; good ones follow the contract."""

import dataclasses
import re

import numpy as np
import pytest
from conftest import DATA, TINY
from hypothesis import given, settings
from hypothesis import strategies as st

import npbert
from npbert import InputError
from npbert.layer.embedding import normalize


class Tensor:
    """An array of another library, as NumPy reads a torch tensor or a pyarrow array."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __index__(self) -> int:  # a 0-d one, as torch's
        return int(self.values)


class Unreadable:
    def __array__(self, dtype=None, copy=None):
        return np.array(5)  # 0-d, with no __index__: NumPy raises TypeError in a list


@pytest.fixture(scope="module")
def weights():
    return npbert.load_weights(TINY)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_ids": [[2, -1, 3]]}, r"input_ids\[0, 1\] = -1 is out of range \(NumPy would"),
        ({"input_ids": [2, 10_000]}, r"input_ids\[1\] = 10000 is out of range: word_embeddings"),
        ({"input_ids": [2, 3], "token_type_ids": [0, 2]}, r"token_type_ids\[1\] = 2 is out of"),
        ({"input_ids": [2, 3], "token_type_ids": [0, -1]}, r"token_type_ids\[1\] = -1"),
        ({"input_ids": [2, 3], "position_ids": [0, 128]}, r"position_ids\[1\] = 128 is out of"),
        ({"input_ids": [2, 3], "position_ids": [-1, 0]}, r"position_ids\[0\] = -1"),
        ({"input_ids": [2] * 129}, r"129 tokens, more than max_position_embeddings \(128\)"),
        ({"input_ids": [2, 3], "token_type_ids": [0, 0, 0]}, r"token_type_ids has shape \(3,\)"),
        ({"input_ids": [[2, 3]], "position_ids": [0, 1, 2]}, r"position_ids has shape \(3,\)"),
        ({"input_ids": [2, 3], "position_ids": [[0, 1]]}, r"must be \(2,\) like input_ids"),
        ({"input_ids": [2.0, 3.5]}, r"input_ids\[1\] = 3.5 is not an integer id"),
        ({"input_ids": [2.0, np.nan]}, r"input_ids\[1\] = nan is not an integer id"),
        ({"input_ids": [2.0, np.inf]}, r"input_ids\[1\] = inf is not an integer id"),
        ({"input_ids": [2.0, 3.0]}, "must be an integer array, got dtype float64"),
        ({"input_ids": [True, False]}, "must be an integer array, got dtype bool"),
        ({"input_ids": [5, True]}, r"input_ids\[1\] = True is a bool, not an integer id"),
        ({"input_ids": [[5, 3], (2, np.False_)]}, r"input_ids\[1, 1\] = False is a bool"),
        ({"input_ids": [[5, 3], np.array([1, 0], bool)]}, r"input_ids\[1, 0\] = True is a bool"),
        ({"input_ids": [np.array(True), 5]}, r"input_ids\[0\] = True is a bool"),
        ({"input_ids": [np.int64(5), np.True_]}, r"input_ids\[1\] = True is a bool"),
        # rows of another library (torch, pyarrow, pandas): NumPy makes their bools 1 and 0
        ({"input_ids": [Tensor([5, 6]), Tensor([True, False])]}, r"input_ids\[1, 0\] = True"),
        ({"input_ids": [Tensor(5), Tensor(True)]}, r"input_ids\[1\] = True is a bool"),
        (
            {
                "input_ids": [[2, 3], [4, 5]],
                "token_type_ids": [Tensor([0, 1]), Tensor([True, False])],
            },
            r"token_type_ids\[1, 0\] = True is a bool",
        ),
        ({"input_ids": [Unreadable()]}, "input_ids must be an array of integer ids: "),
        ({"input_ids": [2, 3], "token_type_ids": [0, True]}, r"token_type_ids\[1\] = True is"),
        ({"input_ids": [2, 3], "position_ids": [False, 1]}, r"position_ids\[0\] = False is"),
        ({"input_ids": ["2", "3"]}, "must be an integer array"),
        ({"input_ids": []}, "input_ids is empty"),
        ({"input_ids": [[]]}, "input_ids is empty"),
        ({"input_ids": [[2, 3], [2]]}, "input_ids is not a rectangular array"),
        ({"input_ids": 2}, r"shape \(L,\) or \(B, L\), got \(\)"),
        ({"input_ids": None}, "input_ids must be an array of integer ids, got None"),
        ({"input_ids": {2, 3}}, r"input_ids must be an array of integer ids, got \{2, 3\}"),
        ({"input_ids": (i for i in [2, 3])}, "ids, got <generator object"),
        ({"input_ids": np.array(2, object)}, r"ids, got array\(2, dtype=object\)"),
        ({"input_ids": [2, 3], "position_ids": {}}, "position_ids must be an array of integer"),
        ({"input_ids": [2, 3], "token_type_ids": set()}, "token_type_ids must be an array of"),
        ({"input_ids": [[[2]]]}, r"shape \(L,\) or \(B, L\), got \(1, 1, 1\)"),
        ({"input_ids": np.ma.masked_array([2, -1], [0, 1])}, "input_ids is a masked array"),
        (
            {"input_ids": [2, 3], "token_type_ids": np.ma.masked_array([0, 7], [0, 1])},
            "token_type_ids is a masked array with masked entries",
        ),
    ],
)
def test_bad_ids_are_refused_with_a_clear_message(weights, kwargs, message):
    with pytest.raises(InputError, match=message):
        npbert.embed(weights, **kwargs)
    assert issubclass(InputError, ValueError)


def test_defaults_are_type_zero_and_positions_from_zero(weights):
    ids = np.array([[2, 13, 14, 3], [2, 15, 16, 3]])
    default = npbert.embed(weights, ids)
    explicit = npbert.embed(weights, ids, np.zeros_like(ids), np.arange(4))
    np.testing.assert_array_equal(default, explicit)
    assert default.shape == (2, 4, 32) and default.dtype == np.float32


def test_unbatched_ids_give_unbatched_output(weights):
    ids = np.array([2, 13, 14, 3])
    np.testing.assert_array_equal(npbert.embed(weights, ids), npbert.embed(weights, ids[None])[0])


def test_any_integer_dtype_is_accepted(weights):
    ids = [2, 13, 14, 3]
    expected = npbert.embed(weights, ids)
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        np.testing.assert_array_equal(npbert.embed(weights, np.array(ids, dtype)), expected)


@settings(max_examples=50, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 128),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_each_token_is_layer_norm_of_its_three_rows(weights, batch, length, seed, dtype):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, weights.config.vocab_size, (batch, length))
    types = rng.integers(0, 2, (batch, length))
    positions = rng.integers(0, 128, (batch, length))
    output = npbert.embed(weights, ids, types, positions, dtype=dtype)
    b, i = rng.integers(batch), rng.integers(length)
    x = (
        weights.word_embeddings[ids[b, i]].astype(np.float64)
        + weights.token_type_embeddings[types[b, i]]
        + weights.position_embeddings[positions[b, i]]
    )
    x = (x - x.mean()) / np.sqrt(x.var() + weights.config.layer_norm_eps)
    expected = x * weights.layer_norm_weight + weights.layer_norm_bias
    np.testing.assert_allclose(
        output[b, i], expected, rtol=0, atol=1e-5 if dtype is np.float32 else 1e-12
    )


@settings(max_examples=50, deadline=None)
@given(offset=st.floats(-1e4, 1e4), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 1000))
def test_normalize_gives_zero_mean_unit_variance(offset, scale, seed):
    x = np.random.default_rng(seed).normal(offset, scale, (3, 384))
    y = normalize(x, 1e-12)
    variance = x.var(-1)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-8)  # mean/std up to 1e7
    np.testing.assert_allclose(y.var(-1), variance / (variance + 1e-12), rtol=1e-9)


@pytest.mark.parametrize(
    "dtype", [int, bool, np.uint8, np.int64, np.complex128, np.float16, "bogus", None]
)
def test_only_float32_and_float64_are_computed(weights, dtype):
    with pytest.raises(InputError, match="dtype"):
        npbert.embed(weights, [2, 3], dtype=dtype)
    with pytest.raises(InputError, match="dtype"):
        npbert.embed_stages(weights, [2, 3], dtype=dtype)


@pytest.mark.parametrize("threads", [-1, 0, "2", 1.5, True, np.int64(0), np.bool_(True)])
def test_threads_must_be_a_positive_whole_number(weights, threads):
    with pytest.raises(InputError, match="threads must be"):
        npbert.embed(weights, [2, 3], threads=threads)


def test_threads_are_at_most_four_a_core(weights):
    """threads=10**6 started a thread a block (299 for 600 x 256), which the pool then kept."""
    from npbert.layer.cores import cpus
    from npbert.layer.pool import _pool

    most = 4 * cpus()
    ids = np.full((8 * most, 128), 5)  # 4 rows a block of 512 tokens: 2 blocks a thread
    np.testing.assert_array_equal(
        npbert.embed(weights, ids, threads=most)[0], npbert.embed(weights, ids[:1])[0]
    )
    for threads in (most + 1, 10**6):
        with pytest.raises(InputError, match=rf"threads={threads}: more than 4 threads for each"):
            npbert.embed(weights, ids, threads=threads)
    assert max(_pool, default=0) <= most


@pytest.mark.parametrize("project", ["no", "yes", 1, None])
def test_project_must_be_true_or_false(weights, project):
    for function in (npbert.embed, npbert.embed_stages):
        with pytest.raises(InputError, match=f"project must be True or False, got {project!r}"):
            function(weights, [2, 3], project=project)


def test_a_numpy_integer_is_a_whole_number(weights):
    expected = npbert.embed(weights, [2, 3], threads=2)
    np.testing.assert_array_equal(npbert.embed(weights, [2, 3], threads=np.int64(2)), expected)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ([1, 1, 1], r"attention_mask has shape \(3,\), but input_ids has \(2,\)"),
        ([1, 2], r"attention_mask\[1\] = 2 is not 0 or 1"),
        ([1, -1], r"attention_mask\[1\] = -1 is not 0 or 1"),
        ([1.0, 0.5], r"attention_mask\[1\] = 0.5 is not 0 or 1"),
        (["1", "0"], "attention_mask must be an array of 0 and 1"),
        ([[1, 1], [1]], "attention_mask is not a rectangular array"),
        (np.ma.masked_array([1, 7], [0, 1]), "attention_mask is a masked array"),
    ],
)
def test_bad_attention_masks_are_refused(weights, mask, message):
    with pytest.raises(InputError, match=message):
        npbert.embed(weights, [2, 3], attention_mask=mask)


def test_bert_validates_the_mask_and_does_not_use_it(weights):
    # BertEmbeddings takes no mask: padding is embedded like any token (attention ignores it).
    ids = [[2, 13, 0, 0]]
    np.testing.assert_array_equal(
        npbert.embed(weights, ids, attention_mask=[[1, 1, 0, 0]]), npbert.embed(weights, ids)
    )


@pytest.mark.parametrize("bad", [None, "weights", {"word_embeddings": np.zeros((2, 2))}])
def test_embed_and_embedder_refuse_what_is_not_weights(bad):
    with pytest.raises(InputError, match="weights must be npbert's EmbeddingWeights"):
        npbert.embed(bad, [1])
    with pytest.raises(InputError, match="must be npbert's EmbeddingWeights"):
        npbert.Embedder(bad, None)


def test_embedder_refuses_a_tokenizer_of_another_kind(weights):
    with pytest.raises(InputError, match=r"tokenizer must be npbert\.loading\.tokenize\.Tokenizer"):
        npbert.Embedder(weights, None)


def _embed_in_child(weights):
    return npbert.embed(weights, [[2, 13, 14, 3]] * 400, threads=2).sum()


def test_embed_works_in_a_forked_child_after_the_parent_used_threads(weights):
    import multiprocessing

    expected = npbert.embed(weights, [[2, 13, 14, 3]] * 400, threads=2).sum()  # starts the pool
    with multiprocessing.get_context("fork").Pool(1) as pool:
        result = pool.apply_async(_embed_in_child, (weights,))
        assert result.get(timeout=30) == expected  # before the fix: waited forever


@pytest.mark.parametrize(
    ("ids", "where"),
    [
        ([101, 2**70, 5], "input_ids[1] = 1180591620717411303424"),
        ([[1, 2], [3, -(2**63) - 1]], "input_ids[1, 1] = -9223372036854775809"),
    ],
)
def test_an_integer_past_int64_is_named_with_where_it_is(ids, where):
    # NumPy makes such a list an object array: it was "must be an integer array, got object".
    with pytest.raises(npbert.InputError, match=re.escape(f"{where} is out of range of any")):
        npbert.embed(npbert.load_weights(TINY), ids)


def test_a_list_mixing_uint64_and_int_ids_is_ids_not_floats():
    # NumPy makes [np.uint64(5), 3] float64: it was refused as "got dtype float64".
    weights = npbert.load_weights(TINY)
    expected = npbert.embed(weights, np.array([[5, 3], [4, 2]]))
    np.testing.assert_array_equal(npbert.embed(weights, [[np.uint64(5), 3], [4, 2]]), expected)
    with pytest.raises(npbert.InputError, match=r"input_ids\[0\] = 18446744073709551615 is out"):
        npbert.embed(weights, [np.uint64(2**64 - 1), 3])
    with pytest.raises(npbert.InputError, match=r"input_ids\[1\] = 2.5 is not an integer id"):
        npbert.embed(weights, [np.uint64(5), 2.5])


@pytest.mark.parametrize(
    ("family", "message"),
    [
        ("tiny-bert", r"has 11 tokens, more than max_length \(10, of a position table of 128 rows"),
        ("tiny-roberta", r"has 11 tokens that are not padding, more than max_length \(10, of a"),
    ],
)
def test_a_max_length_below_the_position_table_limits_derived_positions_alike(family, message):
    """A config made in code may set max_length below the table: BERT's positions were held
    to it under the table's name, RoBERTa's derived positions only to the table."""
    loaded = npbert.load_weights(DATA / family)
    weights = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, max_length=10))
    assert npbert.embed(weights, np.arange(5, 15)).shape[0] == 10
    with pytest.raises(InputError, match=message):
        npbert.embed(weights, np.arange(5, 16))
