"""Tokenizing with the tokenizers library: padding, pairs, truncation, vocab.txt fallback."""

import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import TINY, no_special_tokens

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


def test_vocab_txt_fallback_follows_tokenizer_configs_normalizer_settings(tmp_path, minilm_dir):
    # A cased-accent, no-CJK-splitting BERT: "café" is then no word of the uncased vocabulary,
    # and 日本 is one word, cut into WordPieces.
    for name in ("config.json", "vocab.txt", "model.safetensors"):
        os.symlink(minilm_dir / name, tmp_path / name)
    settings = {"do_lower_case": True, "strip_accents": False, "tokenize_chinese_chars": False}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    tokens = npbert.Embedder.from_pretrained(tmp_path)("café 日本").tokens
    assert tokens == ["[CLS]", "[UNK]", "日", "##本", "[SEP]"]


def test_too_long_is_an_error_unless_truncation_is_asked(embedder):
    long = "word " * 600
    too_long = r"texts\[1\] has \d+ tokens, more than the limit of 512.*trunc"
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
        (b"hello", None, "texts is bytes: decode it to a str first"),
        (["a"], b"c", "pairs is bytes"),
        (5, None, "texts must be a str or a list of str, not int"),
        (None, None, "texts must be a str or a list of str, not None"),
        (None, "x", "texts must be a str or a list of str, not None"),
        ({"a": 1}, None, "texts must be a str or a list of str, not dict"),
        ({"a", "b"}, None, "not set"),
        ("a", ["c"], "pairs must be a str for a single text, not list"),
        (np.array("a b"), None, "texts is a 0-d array: give a str or a list of str"),
    ],
)
def test_bad_text_input(embedder, texts, pairs, message):
    with pytest.raises(InputError, match=message):
        embedder(texts, pairs)
    with pytest.raises(InputError, match=message):
        embedder.encode(texts, pairs)
    if not isinstance(texts, str) and not isinstance(pairs, str):  # embed_each's own message
        with pytest.raises(InputError, match=message):
            embedder.embed_each(texts, pairs)


def test_a_table_of_texts_is_refused_not_read_as_its_column_names(embedder):
    """A DataFrame iterates over its column names: embedder(frame) embedded the word "text"."""
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"text": ["a b", "c"], "pair": ["d", "e"]})
    message = "texts is a table (DataFrame), which iterates over its columns: give one column"
    for call in (embedder, embedder.encode, embedder.embed_each):
        with pytest.raises(InputError, match=re.escape(message)):
            call(frame)
    with pytest.raises(InputError, match="pairs is a table"):
        embedder(frame["text"], frame)
    columns = embedder(frame["text"], frame["pair"]).embeddings  # a column is a list of texts
    np.testing.assert_array_equal(columns, embedder(["a b", "c"], ["d", "e"]).embeddings)


def test_encode_takes_what_call_takes(embedder):
    one = embedder.encode("a b", "c")  # a batch of one
    np.testing.assert_array_equal(one.input_ids, embedder.encode(["a b"], ["c"]).input_ids)
    np.testing.assert_array_equal(embedder.embed(one)[0], embedder("a b", "c").embeddings)
    np.testing.assert_array_equal(
        embedder.embed(one, threads=1, project=False), embedder.embed(one)
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'attention_mask'"):
        embedder.embed(one, attention_mask=one.attention_mask)  # the Encoding's own


@pytest.mark.parametrize("given", [["hi"], "hi", np.array([[101, 102]]), None])
def test_embed_takes_an_encoding(embedder, given):
    with pytest.raises(InputError, match=r"takes an Encoding from Embedder\.encode, not \w+"):
        embedder.embed(given)


def test_directory_without_tokenizer_is_refused(tmp_path, minilm_dir):
    for name in ("config.json", "model.safetensors"):
        os.symlink(minilm_dir / name, tmp_path / name)
    with pytest.raises(InputError, match=r"has no tokenizer\.json or vocab\.txt"):
        npbert.Embedder.from_pretrained(tmp_path)


def side_files(tmp_path, base, files: dict) -> str:
    """A checkpoint directory: base's config.json and weights, and the given side files."""
    for name in ("config.json", "model.safetensors"):
        os.symlink(base / name, tmp_path / name)
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(tmp_path)


def tokenizer_json(minilm_dir, change) -> str:
    """all-MiniLM-L6-v2's tokenizer.json, changed by change(dict)."""
    data = json.loads((minilm_dir / "tokenizer.json").read_text())
    change(data)
    return json.dumps(data)


def real(name: str):
    """all-MiniLM-L6-v2's own file, unchanged."""
    return lambda minilm_dir: (minilm_dir / name).read_bytes()


def set_in(path: list, value):
    def change(data):
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return change


TOKENIZER_FILES = {
    "tokenizer.json malformed": ({"tokenizer.json": "{oops"}, "not a tokenizer the tokenizers"),
    "tokenizer.json a list": ({"tokenizer.json": "[]"}, "not a tokenizer the tokenizers library"),
    "tokenizer.json binary": ({"tokenizer.json": b"\xff\xfe\0\1"}, "not a tokenizer the"),
    "tokenizer.json of another schema": (
        {"tokenizer.json": lambda m: tokenizer_json(m, set_in(["model"], 3))},
        "not a tokenizer the tokenizers library reads",
    ),
    "tokenizer.json without [UNK]": (
        {"tokenizer.json": lambda m: tokenizer_json(m, set_in(["model", "vocab"], {"a": 0}))},
        "tokenizer.json cannot encode the texts: WordPiece error: Missing [UNK] token",
    ),
    "tokenizer.json with an id past the table": (
        {"tokenizer.json": lambda m: tokenizer_json(m, set_in(["model", "vocab", "hello"], 99999))},
        "tokenizer.json gives the token 'hello' the id 99999, past the model's word table",
    ),
    "tokenizer.json padding past the table": (
        {"tokenizer.json": lambda m: tokenizer_json(m, set_in(["padding", "pad_id"], 99999))},
        "tokenizer.json pads with id 99999, past the model's word table (30522 rows)",
    ),
    "vocab.txt of another model, longer": (  # every id shifted by 5, most still in range
        {"vocab.txt": lambda m: b"".join(b"[x%d]\n" % i for i in range(5)) + real("vocab.txt")(m)},
        "vocab.txt has 30527 words, more than the model's word table (30522 rows)",
    ),
    "tokenizer.json of another model, longer": (
        {"tokenizer.json": lambda m: tokenizer_json(m, set_in(["model", "vocab", "x y"], 30522))},
        "tokenizer.json has 30523 words, more than the model's word table (30522 rows)",
    ),
    "vocab.txt empty": ({"vocab.txt": ""}, "vocab.txt lacks [CLS], [SEP], [UNK]"),
    "vocab.txt binary": ({"vocab.txt": b"\x89PNG\r\n\x1a\n\xff"}, "vocab.txt is not UTF-8 text"),
    "vocab.txt with NUL bytes": (
        {"vocab.txt": b"[CLS]\n[SEP]\n[UNK]\n\0\0\0\n"},
        "vocab.txt holds NUL bytes",
    ),
    "vocab.txt without [SEP]": ({"vocab.txt": "[PAD]\n[UNK]\n[CLS]\nhello\n"}, "lacks [SEP]"),
    "tokenizer_config.json invalid": (
        {"vocab.txt": real("vocab.txt"), "tokenizer_config.json": "{oops"},
        "tokenizer_config.json is not valid JSON",
    ),
    "tokenizer_config.json a list": (
        {"vocab.txt": real("vocab.txt"), "tokenizer_config.json": "[1]"},
        "tokenizer_config.json must hold a JSON object",
    ),
    "tokenizer_config.json do_lower_case a string": (
        {"vocab.txt": real("vocab.txt"), "tokenizer_config.json": '{"do_lower_case": "yes"}'},
        "do_lower_case must be true or false",
    ),
    "tokenizer_config.json pad_token of another type": (
        {"vocab.txt": real("vocab.txt"), "tokenizer_config.json": '{"pad_token": {"content": 5}}'},
        "pad_token must be a string or an object with a string 'content', not int",
    ),
    "tokenizer_config.json invalid beside tokenizer.json": (
        {"tokenizer.json": real("tokenizer.json"), "tokenizer_config.json": "{oops"},
        "tokenizer_config.json is not valid JSON",
    ),
}


@pytest.mark.parametrize("case", TOKENIZER_FILES)
def test_bad_tokenizer_files_are_one_line_errors(tmp_path, capsys, minilm_dir, case):
    from npbert.cli import main

    files, message = TOKENIZER_FILES[case]
    files = {name: c(minilm_dir) if callable(c) else c for name, c in files.items()}
    model = side_files(tmp_path, minilm_dir, files)
    code = main(["embed", "hello world", "a longer text than that", "--model", model])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert err.startswith("npbert: error: ")


def test_a_token_past_the_table_is_named_by_its_text_in_every_path(tmp_path, minilm_dir):
    # one check (model.check_encodings) for a batch, embed_each and the corpus job
    from npbert.stream import embed_corpus

    table = tokenizer_json(minilm_dir, set_in(["model", "vocab", "hello"], 99999))
    model = side_files(tmp_path, minilm_dir, {"tokenizer.json": table})
    embedder = npbert.Embedder.from_pretrained(model)
    message = "gives the token 'hello' the id 99999, past the model's word table (30522 rows)"
    for call in (embedder, embedder.embed_each):
        with pytest.raises(InputError, match=r"texts\[1\]: .*" + re.escape(message)):
            call(["hi there", "hello world"])
    (tmp_path / "c.txt").write_text("hi there\nhello world\n")
    with pytest.raises(InputError, match="c.txt line 2: .*" + re.escape(message)):
        embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o")


LONG = "word " * 600  # 602 tokens, past all-MiniLM-L6-v2's 512
CALLS = {  # name -> a call on a shared Embedder, each with its own options
    "long text, truncated": lambda e: e([LONG, "short"], truncation=True),
    "long text, not truncated": lambda e: e([LONG]),  # must stay an error
    "pairs": lambda e: e(TEXTS[:2], ["Who is Sinan?", "Sinan wrote a notebook."]),
    "single text": lambda e: e(TEXTS[2]),
    "padded batch": lambda e: e(TEXTS),
    "max_length 8, truncated": lambda e: e(TEXTS, max_length=8, truncation=True),
    "each, batches of 2": lambda e: e.embed_each([*TEXTS, LONG], batch_size=2, truncation=True),
}


def outcome(call, embedder):
    """What a call gives: its arrays, or the error it raises."""
    try:
        result = call(embedder)
    except InputError as error:
        return ("error", str(error))
    results = result if isinstance(result, list) else [result]
    return [(r.embeddings, r.input_ids, r.token_type_ids, r.attention_mask) for r in results]


def same(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(p, q, strict=True))
        for p, q in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_threads_sharing_an_embedder_get_what_one_thread_gets(embedder):
    from concurrent.futures import ThreadPoolExecutor

    expected = {name: outcome(call, embedder) for name, call in CALLS.items()}
    assert expected["long text, not truncated"][0] == "error"
    assert expected["long text, truncated"][0][1].shape == (2, 512)
    names = [list(CALLS)[i % len(CALLS)] for i in range(280)]  # 40 calls of each kind
    np.random.default_rng(0).shuffle(names)
    with ThreadPoolExecutor(8) as pool:
        futures = [(name, pool.submit(outcome, CALLS[name], embedder)) for name in names]
        for name, future in futures:
            assert same(future.result(timeout=120), expected[name]), name


def test_embed_each_gives_each_text_as_alone(embedder):
    texts = [*TEXTS, "a", TEXTS[0] + " " + TEXTS[1]]
    pairs = ["x", "y y", "z", "w", "v"]
    for batch_size in (1, 2, 32):
        each = embedder.embed_each(texts, pairs, batch_size=batch_size)
        assert len(each) == len(texts)
        for output, text, pair in zip(each, texts, pairs, strict=True):
            alone = embedder(text, pair)
            assert output.tokens == alone.tokens and output.embeddings.shape[0] == len(alone.tokens)
            for key in ("embeddings", "input_ids", "token_type_ids", "attention_mask"):
                np.testing.assert_array_equal(getattr(output, key), getattr(alone, key))
            assert output.embeddings.base is None  # a copy: no padded batch kept alive


def test_a_text_of_no_tokens_embeds_to_no_rows_alone_and_in_any_batch(tmp_path):
    """With a tokenizer that adds no special tokens, an empty text has no tokens: (0, E), as
    the corpus job gives it. Alone, and in embed_each in a batch of its own, it raised "input_ids
    is empty"; beside a longer text it was already a row of padding."""
    embedder = npbert.Embedder.from_pretrained(no_special_tokens(tmp_path))
    width = embedder.weights.config.output_size
    alone = embedder("")
    assert alone.embeddings.shape == (0, width) and alone.embeddings.dtype == np.float32
    assert alone.input_ids.shape == alone.attention_mask.shape == (0,) and alone.tokens == []
    assert embedder(["", " "]).embeddings.shape == (2, 0, width)
    for batch_size in (1, 32):
        each = embedder.embed_each(["", "a", " "], batch_size=batch_size)
        assert [o.embeddings.shape for o in each] == [(0, width), (1, width), (0, width)]
        np.testing.assert_array_equal(each[1].embeddings, embedder("a").embeddings)
    assert embedder.embed(embedder.encode([""]), dtype=np.float64).dtype == np.float64


@pytest.mark.slow
def test_embed_each_memory_stays_within_a_batch_and_computes_no_padding(embedder, monkeypatch):
    """5,000 texts are never one (5000, L, E) array: each call of the layer sees batch_size
    texts at most, their tokens back to back, none of padding."""
    from npbert import embedder as model

    seen = []
    real = model.embed_encodings

    def counting(weights, encodings, **kwargs):
        seen.append((len(encodings), sum(len(e.ids) for e in encodings)))
        return real(weights, encodings, **kwargs)

    monkeypatch.setattr(model, "embed_encodings", counting)
    texts = [("word " * (i % 40)).strip() or "x" for i in range(5000)]
    each = embedder.embed_each(texts, batch_size=64)
    assert len(each) == 5000 and max(n for n, _ in seen) == 64 and len(seen) == 79
    assert sum(tokens for _, tokens in seen) == sum(len(o.tokens) for o in each)


def test_embed_each_takes_texts_of_any_lengths_without_a_pad_token(tmp_path):
    # It padded each batch, and a tokenizer without a pad token refused texts of two lengths
    from tokenizers import BertWordPieceTokenizer

    shutil.copytree(TINY, tmp_path / "m")
    tokenizer = BertWordPieceTokenizer(str(TINY / "vocab.txt"))  # no padding set
    (tmp_path / "m" / "tokenizer.json").write_text(tokenizer._tokenizer.to_str())
    config = json.loads((TINY / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "pad_token_id": None}))
    embedder = npbert.Embedder.from_pretrained(tmp_path / "m")
    assert embedder.tokenizer.pad_token_id is None
    with pytest.raises(npbert.InputError, match="the tokenizer has no pad token"):
        embedder(["i am", "i am sinan"])  # a padded batch: still refused
    each = embedder.embed_each(["i am", "i am sinan"])
    np.testing.assert_array_equal(each[1].embeddings, embedder("i am sinan").embeddings)


def test_embed_each_shows_a_progress_bar_only_when_asked(embedder, capsys):
    embedder.embed_each(TEXTS, batch_size=1)
    assert capsys.readouterr().err == ""
    embedder.embed_each(TEXTS, batch_size=1, show_progress_bar=True)
    assert "3/3" in capsys.readouterr().err


def test_an_embedder_goes_to_another_process(embedder):
    """A process pool pickles what it sends: the tokenizer's cache of truncating copies made
    that a PicklingError."""
    import pickle

    other = pickle.loads(pickle.dumps(embedder))
    for options in ({}, {"truncation": True, "max_length": 6}):
        np.testing.assert_array_equal(
            other(TEXTS, **options).embeddings, embedder(TEXTS, **options).embeddings
        )
    assert other.tokenizer.pad_token_id == embedder.tokenizer.pad_token_id
    assert not other.weights.word_embeddings.flags.writeable


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_embed_each_of_a_local_model_reads_no_hub_setting(embedder, monkeypatch, value):
    """It imported huggingface_hub's tqdm, and so checked the Hub's timeouts, which
    embedder(texts) does not: a setting for downloads stopped a local embedding."""
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", value)
    each = embedder.embed_each(TEXTS[:1])
    np.testing.assert_array_equal(each[0].embeddings, embedder(TEXTS[0]).embeddings)


def test_max_length_per_call_is_capped_by_the_model(embedder):
    cut = embedder(TEXTS, max_length=6, truncation=True)
    assert cut.input_ids.shape == (3, 6) and all(t[-1] == "[SEP]" for t in cut.tokens)
    with pytest.raises(InputError, match=r"texts\[0\] has 11 tokens, more than the limit of 6"):
        embedder(TEXTS, max_length=6)
    capped = embedder([LONG], max_length=10_000, truncation=True)
    assert capped.input_ids.shape == (1, 512)  # the model's limit
    with pytest.raises(InputError, match="more than the limit of 512"):
        embedder([LONG], max_length=10_000)


@pytest.mark.parametrize(("texts", "max_length"), [(["hello world"], 1), (["a", "b"], 2)])
def test_truncation_that_cannot_fit_the_special_tokens_says_so(embedder, texts, max_length):
    with pytest.raises(InputError, match="too few for the tokenizer's own special tokens") as e:
        embedder(texts[0], *texts[1:], max_length=max_length, truncation=True)
    assert "pass truncation=True" not in str(e.value)


@pytest.mark.parametrize(
    ("args", "max_length", "lost"),
    [
        (["hello world"], 2, "text"),
        (["hello world", "foo bar"], 3, "text or pair"),
        (["hello world", "foo bar"], 4, "text"),
        (["", "foo bar"], 3, "pair"),
    ],
)
def test_truncation_that_leaves_only_special_tokens_is_refused(embedder, args, max_length, lost):
    # Every text would embed alike: [CLS] [SEP].
    message = f"truncation to max_length={max_length} leaves no token of its {lost}: give"
    with pytest.raises(InputError, match=message):
        embedder(*args, max_length=max_length, truncation=True)


def test_an_empty_text_is_not_emptied_by_truncation(embedder):
    assert embedder("", max_length=2, truncation=True).tokens == ["[CLS]", "[SEP]"]
    output = embedder("", "foo bar", max_length=4, truncation=True)
    assert output.tokens == ["[CLS]", "[SEP]", "foo", "[SEP]"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a whole number of at least 1, got 0"),
        ({"batch_size": 2.0}, "batch_size must be a whole number"),
        ({"batch_size": True}, "batch_size must be a whole number"),
        ({"max_length": 0}, "max_length must be a whole number of at least 1"),
        ({"max_length": "8"}, "max_length must be a whole number"),
    ],
)
def test_bad_batch_size_and_max_length(embedder, kwargs, message):
    with pytest.raises(InputError, match=message):
        embedder.embed_each(TEXTS, **kwargs)
    if "max_length" in kwargs:
        with pytest.raises(InputError, match=message):
            embedder(TEXTS, **kwargs)


def test_a_huge_argument_in_the_wrong_place_is_named_in_a_short_message(embedder, tmp_path):
    """A list of texts given where a count, a flag or a path goes was repeated whole in the
    message: 49 MB for a million texts."""
    from npbert.stream import embed_corpus

    texts = ["a sentence of a corpus"] * 100_000
    calls = [
        lambda: embedder.embed_each(["a"], batch_size=texts),
        lambda: embedder("a", truncation=texts),
        lambda: embed_corpus(embedder, texts, tmp_path / "out"),
        lambda: embed_corpus(embedder, "in.txt", tmp_path / "out", input_format=texts),
        lambda: npbert.embed(embedder.weights, [[1]], dtype=texts),
    ]
    for call in calls:
        with pytest.raises(InputError) as caught:
            call()
        assert len(str(caught.value)) < 200 and "... (list)" in str(caught.value)


def test_an_argument_whose_repr_fails_is_named_by_its_type(embedder):
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    message = "batch_size must be a whole number of at least 1, got a Broken"
    with pytest.raises(InputError, match=message):
        embedder.embed_each(["a"], batch_size=Broken())


def test_embed_each_takes_lists(embedder):
    with pytest.raises(InputError, match="embed_each takes lists"):
        embedder.embed_each("one text")


def test_numpy_integers_are_counts_too(embedder):
    each = embedder.embed_each(TEXTS, batch_size=np.int64(2), max_length=np.int32(512))
    assert [len(o.tokens) for o in each] == [len(embedder(text).tokens) for text in TEXTS]


def test_a_pair_on_a_model_of_one_token_type_is_refused_by_what_it_is(tmp_path):
    from conftest import DATA, TINY
    from safetensors.numpy import load_file, save_file

    from npbert.stream import embed_corpus

    shutil.copytree(TINY, tmp_path / "m")
    tensors = load_file(str(TINY / "model.safetensors"))
    name = "bert.embeddings.token_type_embeddings.weight"
    save_file({**tensors, name: tensors[name][:1]}, str(tmp_path / "m" / "model.safetensors"))
    config = json.loads((TINY / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "type_vocab_size": 1}))
    embedder = npbert.Embedder.from_pretrained(tmp_path / "m")
    assert not embedder("who").token_type_ids.any()  # a text alone needs only type 0
    message = "the tokenizer gives sentence B token type 1, but this bert has 1 token type(s)"
    with pytest.raises(npbert.InputError, match=re.escape(f"pairs[0]: {message}")):
        embedder(["who"], ["me"])
    with pytest.raises(npbert.InputError, match=re.escape(f"pairs[0]: {message}")):
        embedder.embed_each(["a b c d e f", "who"], ["a", "me"], batch_size=1)  # input order
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n{"text": "who", "pair": "me"}\n')
    with pytest.raises(npbert.InputError, match=re.escape(f"c.jsonl line 2: {message}")):
        embed_corpus(embedder, tmp_path / "c.jsonl", tmp_path / "o")
    roberta = npbert.Embedder.from_pretrained(DATA / "tiny-roberta")  # one type, pairs all 0
    assert roberta.weights.config.type_vocab_size == 1
    assert not roberta("who", "me").token_type_ids.any()


def test_errors_name_the_callers_text_or_pair_in_any_batch(tmp_path):
    """embed_each sorts texts by length: an error named the text's row in its sorted batch
    (texts[1] for texts[2]), and a pair's token was blamed on its text."""
    from conftest import TINY
    from tokenizers import BertWordPieceTokenizer

    shutil.copytree(TINY, tmp_path / "m")
    library = BertWordPieceTokenizer(str(TINY / "vocab.txt"), lowercase=True)
    library.add_tokens(["zzznew"])  # id 87, past tiny-bert's 87 rows
    library.save(str(tmp_path / "m" / "tokenizer.json"))
    embedder = npbert.Embedder.from_pretrained(tmp_path / "m")
    message = "gives the token 'zzznew' the id 87, past the model's word table (87 rows)"
    for batch_size in (1, 2, 32):
        with pytest.raises(InputError, match=r"^texts\[2\]: .*" + re.escape(message)):
            embedder.embed_each(["i am i am i am", "am", "i am zzznew"], batch_size=batch_size)
        with pytest.raises(InputError, match=r"^pairs\[1\]: "):
            embedder.embed_each(["i am i am", "am"], ["am", "i zzznew"], batch_size=batch_size)
    with pytest.raises(InputError, match=r"^pairs\[0\]: "):
        embedder(["i am", "i am"], ["i zzznew", "am"])


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-roberta"])  # vocab.txt, tokenizer.json
def test_a_checkpoint_under_a_path_that_is_not_utf8_is_refused_by_name(tmp_path, name):
    """Linux paths are bytes; the tokenizers library takes str, and failed with
    "failed to extract enum PyVocab" (vocab.txt) or said the tokenizer.json was unreadable."""
    from conftest import DATA

    directory = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"m\xff"))
    shutil.copytree(DATA / name, directory)
    with pytest.raises(InputError, match=r"m\\udcff': the tokenizers library cannot open"):
        npbert.Embedder.from_pretrained(directory)


def test_a_token_type_past_the_table_is_blamed_on_the_tokenizer(tmp_path):
    """A post-processor giving a type the model has no row for was reported as
    "token_type_ids[10] = 5 is out of range", a flat offset in a shard, naming no text."""
    from conftest import TINY
    from tokenizers import BertWordPieceTokenizer
    from tokenizers.processors import TemplateProcessing

    from npbert.stream import embed_corpus

    shutil.copytree(TINY, tmp_path / "m")
    library = BertWordPieceTokenizer(str(TINY / "vocab.txt"))
    specials = [(t, library.token_to_id(t)) for t in ("[CLS]", "[SEP]")]
    library.post_processor = TemplateProcessing(
        single="[CLS] $A:5 [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=specials
    )
    library.save(str(tmp_path / "m" / "tokenizer.json"))
    embedder = npbert.Embedder.from_pretrained(tmp_path / "m")
    message = "gives token type 5, but this bert has 2 token type(s): the tokenizer and the"
    with pytest.raises(InputError, match=re.escape(f"texts[0]: {tmp_path / 'm'}")) as caught:
        embedder(["who", "me"])
    assert message in str(caught.value)
    (tmp_path / "c.txt").write_text("who\nme\n")
    with pytest.raises(InputError, match=re.escape(f"c.txt line 1: {tmp_path / 'm'}")):
        embed_corpus(embedder, tmp_path / "c.txt", tmp_path / "o")
