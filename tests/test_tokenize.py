"""Tokenizing with the tokenizers library: padding, pairs, truncation, vocab.txt fallback."""

import os

import numpy as np
import pytest

import npbert
from npbert import InputError

TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "Héllo, WORLD! naïve café — 42 unbelievable tokenizations?",
    "I am Sinan",
]


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    return npbert.Embedder.from_pretrained(minilm_dir)


def test_padding_stored_in_tokenizer_json_does_not_leak(embedder):
    assert embedder(TEXTS[2]).input_ids.shape == (6,)


def test_batch_is_padded_to_its_longest_text(embedder):
    result = embedder(TEXTS)
    lengths = [len(embedder(t).input_ids) for t in TEXTS]
    assert result.input_ids.shape == (3, max(lengths))
    assert result.embeddings.shape == (3, max(lengths), 384)
    assert result.attention_mask.sum(axis=1).tolist() == lengths
    assert (result.input_ids[result.attention_mask == 0] == 0).all()  # pad_token_id
    assert embedder(TEXTS[2]).input_ids.shape == (6,)  # no padding left behind


def test_padded_rows_equal_each_text_alone(embedder):
    result = embedder(TEXTS)
    for b, text in enumerate(TEXTS):
        alone = embedder(text)
        np.testing.assert_array_equal(
            result.embeddings[b, : len(alone.input_ids)], alone.embeddings
        )


def test_pair_has_segment_a_then_b(embedder):
    result = embedder("Who is Sinan?", "Sinan wrote a notebook.")
    sep = [i for i, t in enumerate(result.tokens) if t == "[SEP]"]
    assert result.tokens[0] == "[CLS]" and len(sep) == 2 and sep[1] == len(result.tokens) - 1
    assert result.token_type_ids.tolist() == [0] * (sep[0] + 1) + [1] * (sep[1] - sep[0])


def test_vocab_txt_fallback_tokenizes_like_tokenizer_json(tmp_path, minilm_dir, embedder):
    for name in ("config.json", "vocab.txt", "model.safetensors", "tokenizer_config.json"):
        os.symlink(minilm_dir / name, tmp_path / name)
    fallback = npbert.Embedder.from_pretrained(tmp_path)
    assert type(fallback.tokenizer.tokenizer).__name__ == "BertWordPieceTokenizer"
    for text in TEXTS:
        np.testing.assert_array_equal(fallback(text).input_ids, embedder(text).input_ids)
    np.testing.assert_array_equal(
        fallback(TEXTS[0], TEXTS[1]).token_type_ids, embedder(TEXTS[0], TEXTS[1]).token_type_ids
    )


def test_too_long_is_an_error_unless_truncation_is_asked(embedder):
    long = "word " * 600
    too_long = r"text 1 has \d+ tokens, more than the model's 512.*trunc"
    with pytest.raises(InputError, match=too_long):
        embedder(["short", long])
    result = embedder(["short", long], truncation=True)
    assert result.input_ids.shape == (2, 512)
    assert result.tokens[1][-1] == "[SEP]"


@pytest.mark.parametrize(
    ("texts", "pairs", "message"),
    [
        ([], None, "no text to embed"),
        (["a", 3], None, r"texts\[1\] is int, not a string"),
        (["a", "b"], ["c"], "2 texts but 1 pairs"),
        (["a", "b"], "c", "one pair per text"),
    ],
)
def test_bad_text_input(embedder, texts, pairs, message):
    with pytest.raises(InputError, match=message):
        embedder(texts, pairs)


def test_directory_without_tokenizer_is_refused(tmp_path, minilm_dir):
    for name in ("config.json", "model.safetensors"):
        os.symlink(minilm_dir / name, tmp_path / name)
    with pytest.raises(InputError, match=r"has no tokenizer\.json or vocab\.txt"):
        npbert.Embedder.from_pretrained(tmp_path)
