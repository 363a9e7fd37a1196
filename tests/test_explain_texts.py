"""npbert explain with several texts, what they share, and the BERT paper's figure drawn with
a checkpoint's values."""

import numpy as np
import pytest
from conftest import DATA

import npbert
from npbert.analysis.explain import explain, explain_texts
from npbert.analysis.explain_plot import FIRST, LAST, figure_data
from npbert.cli import main


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def section(out: str) -> str:
    return out[out.index("What the") :]


def test_two_texts_share_their_special_tokens_rows_and_positions(capsys, minilm_dir):
    code, out, _ = run(capsys, "explain", "I am Sinan", "She is Zoe", "--model", minilm_dir)
    assert code == 0 and out.count("Check: npbert.embed()") == 2
    shared = section(out)
    assert "[CLS] (id 101): the same row at text 1 position 0, text 2 position 0" in shared
    assert "[SEP] (id 102): the same row at text 1 position 5, text 2 position 4" in shared
    assert "(position i takes row i): equal at the 5 rows more than one text looks up" in shared
    assert "text 1: tokens 0..5 row 0" in shared and "text 2: tokens 0..4 row 0" in shared


def test_repeats_within_a_text_and_a_pairs_segments_are_said(capsys, minilm_dir):
    argv = ["explain", "Who is Sinan?", "--pair", "Sinan wrote a notebook.", "--model", minilm_dir]
    code, out, _ = run(capsys, *argv)
    shared = section(out)
    assert code == 0 and shared.startswith("What the text shares")
    assert "sin (id 8254): the same row at text 1 position 3, text 1 position 7" in shared
    assert "(a pair: sentence B takes row 1): tokens 0..6 row 0, tokens 7..13 row 1" in shared


def test_one_text_with_nothing_shared_is_walked_through_as_before(capsys):
    weights = npbert.load_weights(DATA / "tiny-bert")
    inputs = (["[CLS]", "a", "[SEP]"], [2, 5, 3], None, None, None)
    text, equal = explain_texts(weights, [inputs])
    assert (text, equal) == explain(weights, *inputs)
    assert "What the" not in text


def test_positions_derived_from_the_padding_are_shared_by_the_familys_rule(capsys):
    """RoBERTa's rows count the real tokens from padding_idx + 1: texts of other lengths
    look up the same rows at the same places."""
    weights = npbert.load_weights(DATA / "tiny-roberta")  # padding_idx 1
    texts = [(None, [0, 40, 41, 2], None, None, None), (None, [0, 50, 2], None, None, None)]
    text, equal = explain_texts(weights, texts)
    shared = section(text)
    assert equal and "takes row padding_idx + 1 + i = 2 + i, padding row 1" in shared
    assert "equal at the 3 rows more than one text looks up" in shared  # rows 2, 3, 4
    assert "id 0: the same row at text 1 position 0, text 2 position 0" in shared


def test_pairs_are_one_for_each_text(capsys):
    code, _, err = run(capsys, "explain", "a", "b", "--pair", "c", "--model", DATA / "tiny-bert")
    assert code == 2 and "2 TEXT and 1 --pair; give one --pair for each TEXT, or none" in err


@pytest.mark.parametrize("model", ["tiny-bert", "tiny-roberta", "tiny-distilbert",
                                   "tiny-modernbert", "tiny-deberta", "minilm"])  # fmt: skip
def test_the_figure_draws_the_stages(model, minilm_dir):
    """A column a token, a row a stage the family has, in the order computed, its values the
    stage's: whole, or of a wide model its first and last dimensions with a blank row between."""
    weights = npbert.load_weights(minilm_dir if model == "minilm" else DATA / model)
    ids = np.array([1, 7, 8, 9, 7, 2])
    types = np.array([0, 0, 0, 1, 1, 1]) if weights.config.type_vocab_size > 1 else None
    data = figure_data(weights, list("abcdbe"), ids, types, None, None)
    stages = npbert.embed_stages(weights, ids, types)
    drawn = [name for name in stages if name in ("word", "token_type", "position", "sum",
                                                 "embed_proj", "embeddings")]  # fmt: skip
    assert len(data["rows"]) == len(drawn) and data["columns"][0] == "a\n1"
    width = stages["embeddings"].shape[-1]
    for name, (_, matrix) in zip(drawn, data["rows"], strict=True):
        values = stages[name].T  # (E, L)
        if width <= 64:
            np.testing.assert_array_equal(matrix, values, err_msg=name)
        else:
            np.testing.assert_array_equal(matrix[:FIRST], values[:FIRST], err_msg=name)
            assert np.isnan(matrix[FIRST]).all()
            np.testing.assert_array_equal(matrix[FIRST + 1 :], values[-LAST:], err_msg=name)
    assert ("Segment" in str(data["rows"])) == ("token_type" in stages)
    assert ("Position" in str(data["rows"])) == ("position" in stages)


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_explain_plot_writes_the_figure(capsys, tmp_path, minilm_dir, suffix, magic):
    path = tmp_path / f"pair{suffix}"
    argv = ["explain", "Who is Sinan?", "--pair", "Sinan wrote a notebook.", "--model"]
    code, out, _ = run(capsys, *argv, minilm_dir, "--plot", path)
    assert code == 0 and out.rstrip().endswith(f"figure: {path}")
    assert path.read_bytes().startswith(magic) and not list(tmp_path.glob(".*tmp"))


def test_explain_plot_draws_one_text(capsys, tmp_path):
    argv = ["explain", "a", "b", "--model", DATA / "tiny-bert", "--plot", tmp_path / "x.png"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--plot draws one text (or a pair), not 2" in err
    assert not (tmp_path / "x.png").exists()
