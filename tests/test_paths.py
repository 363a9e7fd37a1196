"""Every public function that takes a path takes a str and any os.PathLike, not only a Path."""

import os

import numpy as np
import pytest
from conftest import TINY

import npbert
from npbert.atomic import building_directory, write_atomically
from npbert.loading.checkpoint import load_checkpoint, locate_checkpoint
from npbert.loading.npyfile import load_npy, load_npz
from npbert.loading.tokenize import load_tokenizer
from npbert.stream import embed_corpus, read_corpus
from npbert.verify.candidates import load_candidate
from npbert.verify.vectors import write_vectors


class Where(os.PathLike):
    """An os.PathLike that is not a pathlib.Path (its str() is not the path)."""

    def __init__(self, path):
        self.path = str(path)

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"Where({self.path!r})"


@pytest.fixture(params=[str, Where], ids=["str", "PathLike"])
def as_path(request):
    return request.param


def test_loading_takes_any_path(as_path):
    expected = npbert.load_weights(TINY)
    for loaded in (
        npbert.load_weights(as_path(TINY)),
        npbert.Embedder.from_pretrained(as_path(TINY)).weights,
        load_checkpoint(as_path(TINY)),
    ):
        np.testing.assert_array_equal(loaded.word_embeddings, expected.word_embeddings)
        assert os.path.samefile(loaded.source["model"], TINY)  # the path, not a repr
    assert locate_checkpoint(as_path(TINY))[0] == expected.config
    tokenizer = load_tokenizer(as_path(TINY), vocab_txt=True, pad_token_id=0)
    assert tokenizer.tokenizer.encode("i am").ids == [2, 13, 14, 3]


def test_corpus_takes_any_path(tmp_path, as_path):
    embedder = npbert.Embedder.from_pretrained(TINY)
    (tmp_path / "corpus.txt").write_text("i am\nsinan\n")
    index = embed_corpus(
        embedder,
        as_path(tmp_path / "corpus.txt"),
        as_path(tmp_path / "corpus.emb"),
        input_format="txt",
        progress=False,
    )
    assert index["complete"] and index["input"] == str(tmp_path / "corpus.txt")
    rows = list(read_corpus(as_path(tmp_path / "corpus.emb")))  # the README's call, with a str
    np.testing.assert_array_equal(rows[0], embedder("i am").embeddings)


def test_writing_and_comparing_take_any_path(tmp_path, as_path):
    embedder = npbert.Embedder.from_pretrained(TINY)
    manifest = write_vectors(embedder, as_path(tmp_path / "vectors"))
    assert (tmp_path / "vectors" / "manifest.json").is_file() and manifest["cases"]
    output = embedder("i am").embeddings
    np.save(tmp_path / "c.npy", output)
    np.savez(tmp_path / "c.npz", embeddings=output)
    for name, key in (("c.npy", "output"), ("c.npz", "embeddings")):
        np.testing.assert_array_equal(load_candidate(as_path(tmp_path / name))[key], output)
    np.testing.assert_array_equal(load_npy(as_path(tmp_path / "c.npy"), "ids"), output)
    assert list(load_npz(as_path(tmp_path / "c.npz"), "candidate")) == ["embeddings"]
    write_atomically(as_path(tmp_path / "f.bin"), lambda f: f.write(b"x"))
    with building_directory(as_path(tmp_path / "d")) as building:
        (building / "inside").write_bytes(b"x")
    assert (tmp_path / "f.bin").read_bytes() == (tmp_path / "d" / "inside").read_bytes()
