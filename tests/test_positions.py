"""`npbert positions`: sinusoidal tables come out sinusoidal, random and learned ones do not."""

import ast
import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DATA, TINY

import npbert
from npbert.analysis.positions import analyse, sinusoidal_table
from npbert.analysis.positions_report import format_report
from npbert.cli import main

ROOT = Path(__file__).resolve().parent.parent
DISTILBERT = DATA / "tiny-distilbert-sinusoidal"  # made by transformers, sinusoidal_pos_embds


def transformer_sinusoids(num_positions: int, hidden_size: int) -> np.ndarray:
    """ "Attention is all you need", 3.5, written out: PE(pos, 2i) = sin(pos / 10000^(2i/d)),
    PE(pos, 2i + 1) = cos(pos / 10000^(2i/d)); stored as float32, as checkpoints store it."""
    table = np.zeros((num_positions, hidden_size))
    for pos in range(num_positions):
        for i in range(0, hidden_size, 2):
            table[pos, i] = math.sin(pos / 10000 ** (i / hidden_size))
            if i + 1 < hidden_size:
                table[pos, i + 1] = math.cos(pos / 10000 ** (i / hidden_size))
    return table.astype(np.float32)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_analysis_imports_nothing_but_numpy_at_module_level():
    for module in ("positions.py", "positions_report.py"):
        tree = ast.parse((ROOT / "npbert" / "analysis" / module).read_text())
        imported = {
            alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        allowed = {"numpy", "npbert.analysis.positions_report", "npbert.layer.embedding"}
        assert imported <= allowed, module  # the spec imports nothing but NumPy


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(512, 384), (512, 768), (128, 32), (40, 17)])
def test_the_sinusoidal_table_comes_out_sinusoidal(shape):
    table = transformer_sinusoids(*shape)
    np.testing.assert_allclose(sinusoidal_table(*shape), table, atol=1e-6)
    figures = analyse(table)
    model = figures["tables"]["model"]
    assert model["fit"]["r2_adjusted"] >= 0.999
    assert min(model["fit"]["per_dimension"]["values"]) >= 0.999
    assert model["frequency"]["at_sinusoid_frequency"] >= 0.95
    assert model["frequency"]["faster_than_sinusoids"] == 0
    assert figures["verdict"] == "sinusoidal"


def test_a_random_table_is_not_sinusoidal_and_the_adjustment_is_why(record):
    # P < H, as in bert-base: H + 1 regressors per column would fit any table exactly. The
    # basis of the sinusoids' span fits random numbers by chance (raw R^2 well above 0); the
    # adjusted R^2 takes that back to about 0.
    table = np.random.default_rng(1).normal(0.0, 0.02, (256, 768)).astype(np.float32)
    figures = analyse(table)
    fit = figures["tables"]["model"]["fit"]
    record(f"positions, random 256 x 768: R^2 {fit['r2']:.3f}, adjusted {fit['r2_adjusted']:.3f}")
    assert figures["basis_rank"] < 256 - 1
    assert fit["r2"] > 0.1 and abs(fit["r2_adjusted"]) < 0.05
    assert figures["verdict"] == "not sinusoidal"
    similarity = figures["tables"]["model"]["similarity"]
    assert abs(similarity["neighbour"]) < 0.1 and abs(similarity["far"]) < 0.1  # no band
    # the baseline inside every report is such a table too
    assert abs(figures["tables"]["random"]["fit"]["r2_adjusted"]) < 0.05


def test_a_pretraining_length_of_one_shows_position_0_once():
    report = format_report(analyse(np.random.default_rng(5).normal(size=(64, 16)),
                                   pretraining_length=1))  # fmt: skip
    assert report.count("row norm, position 0 ") == 1


def test_too_few_positions_to_tell():
    figures = analyse(np.random.default_rng(2).normal(size=(8, 64)))
    assert figures["basis_rank"] == 7 and figures["tables"]["model"]["fit"]["r2_adjusted"] is None
    assert figures["verdict"] == "too few positions"
    assert figures["reading"][0].startswith("Too few positions to tell")
    # two positions: "span 1 directions"
    assert "span 1 direction, enough" in analyse(np.ones((2, 4)) * [[0], [1]])["reading"][0]


def test_sinusoids_mixed_across_dimensions_are_a_linear_map_not_the_table():
    table = sinusoidal_table(256, 64)
    rotation, _ = np.linalg.qr(np.random.default_rng(3).normal(size=(64, 64)))
    figures = analyse(table @ rotation)
    assert figures["tables"]["model"]["fit"]["r2_adjusted"] >= 0.999
    assert figures["verdict"] == "in the sinusoids' span"


def test_a_smooth_table_without_sinusoids_is_not_called_a_mix_of_them():
    """A random walk lies in the sinusoids' span as every slow curve does (adjusted R^2 0.99):
    it was called "a mix of sinusoids"."""
    walk = np.cumsum(np.random.default_rng(0).normal(0, 0.01, (512, 384)), axis=0)
    figures = analyse(walk)
    assert figures["tables"]["model"]["fit"]["r2_adjusted"] >= 0.99
    assert figures["verdict"] == "in the sinusoids' span"
    assert "does not say that it was made of sinusoids" in figures["reading"][0]
    assert "mix of sinusoids" not in " ".join(figures["reading"])


def test_row_norms_past_the_pretraining_length():
    table = np.random.default_rng(4).normal(size=(64, 16))
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    table[20:] *= 3.0
    table[0] *= 10.0
    norms = analyse(table, pretraining_length=20)["tables"]["model"]["norms"]
    assert norms["mean_past_pretraining"] == pytest.approx(3.0)
    assert norms["last_within_pretraining"] == pytest.approx(1.0)
    assert norms["first"] == pytest.approx(10.0) and norms["largest"][0][0] == 0
    assert (
        analyse(table, pretraining_length=64)["tables"]["model"]["norms"]["mean_past_pretraining"]
        is None
    )


@pytest.mark.parametrize(
    "table, message",
    [
        (np.zeros(5), r"not \(5,\)"),
        (np.full((4, 3), np.nan), "12 non-finite values"),
        (np.ones((4, 3)), "the same at every position"),
    ],
)
def test_bad_tables_are_refused(table, message):
    with pytest.raises(npbert.InputError, match=message):
        analyse(table)


def test_minilm_is_learned_with_a_band(minilm_dir, record):
    figures = analyse(npbert.load_weights(minilm_dir).position_embeddings)
    model = figures["tables"]["model"]
    fit, similarity = model["fit"], model["similarity"]
    record(
        f"positions, all-MiniLM-L6-v2: R^2 {fit['r2']:.3f}, adjusted {fit['r2_adjusted']:.3f} "
        f"(random {figures['tables']['random']['fit']['r2_adjusted']:.3f}); cosine "
        f"{similarity['neighbour']:.2f} at distance 1, {similarity['far']:.2f} at 256+"
    )
    assert fit["r2_adjusted"] < 0.9 and figures["verdict"] == "not sinusoidal"
    assert model["frequency"]["at_sinusoid_frequency"] < 0.5
    # the band: nearby positions are much more alike than distant ones
    by_distance = np.array(similarity["by_distance"])
    assert by_distance[1] > 0.7 and by_distance[1:5].mean() > by_distance[256:].mean() + 0.4


EXPECTED_KEYS = {
    "model", "model_type", "first_row", "shape", "pretraining_length", "basis_rank", "random_seed",
    "verdict", "reading", "tables",
}  # fmt: skip
TABLE_KEYS = {
    "fit": {"r2", "r2_adjusted", "per_dimension"},
    "frequency": {
        "at_sinusoid_frequency", "faster_than_sinusoids", "median_period", "dominant_frequency",
    },
    "similarity": {"neighbour", "far", "at_distance", "by_distance"},
    "norms": {
        "first", "last", "median", "mean_within_pretraining", "mean_past_pretraining",
        "last_within_pretraining", "largest", "by_position",
    },
}  # fmt: skip


def test_json_keys_are_stable(capsys, minilm_dir):
    code, out, _ = run(capsys, "positions", "--model", minilm_dir, "--json")
    assert code == 0
    figures = json.loads(out)
    assert set(figures) == EXPECTED_KEYS and figures["shape"] == [512, 384]
    assert set(figures["tables"]) == {"model", "sinusoidal", "random"}
    for table in figures["tables"].values():
        assert {k: set(v) for k, v in table.items()} == TABLE_KEYS
        assert set(table["fit"]["per_dimension"]) == {"median", "p10", "p90", "values"}
        assert len(table["fit"]["per_dimension"]["values"]) == 384
        assert len(table["similarity"]["by_distance"]) == 512


def test_report_prints_the_three_tables_and_the_verdict(capsys, minilm_dir):
    code, out, _ = run(capsys, "positions", "--model", minilm_dir)
    assert code == 0
    assert "model sinusoidal     random" in out
    assert "verdict: not sinusoidal" in out and "Nearby positions are alike" in out


@pytest.mark.slow
@pytest.mark.parametrize(("length", "rows"), [("100", 2), ("512", 1)])
def test_the_last_pretrained_position_is_a_row_of_its_own_unless_it_is_the_last(
    capsys, minilm_dir, length, rows
):
    code, out, _ = run(capsys, "positions", "--model", minilm_dir, "--pretraining-length", length)
    assert code == 0
    assert out.count("row norm, position 511") == 1
    assert len([line for line in out.splitlines() if "row norm, position " in line]) == rows + 1


@pytest.mark.slow
def test_plot_is_written_and_reads_back(tmp_path, capsys, minilm_dir):
    from matplotlib.image import imread

    from npbert.analysis.figures import DPI
    from npbert.analysis.positions_plot import FIGSIZE

    path = tmp_path / "positions.png"
    code, out, _ = run(capsys, "positions", "--model", minilm_dir, "--plot", path)
    assert code == 0 and f"wrote {path}" in out
    pixels = imread(path)[..., :3]  # (height, width, RGB) floats in 0..1
    assert pixels.shape == (FIGSIZE[1] * DPI, FIGSIZE[0] * DPI, 3)
    assert pixels.std() > 0.2  # not blank: heatmaps in colour on white
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    assert path.stat().st_size < 400_000
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.slow
@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_plot_in_vector_formats(tmp_path, suffix, magic):
    from npbert.analysis.positions_plot import plot_positions

    table = transformer_sinusoids(64, 16)
    path = tmp_path / f"positions{suffix}"
    plot_positions(table, analyse(table), path, title="sinusoids")
    assert path.read_bytes().startswith(magic)


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, capsys, minilm_dir, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    path = tmp_path / "positions.png"
    code, out, err = run(capsys, "positions", "--model", minilm_dir, "--plot", path)
    assert code == 2 and not path.exists()
    assert out == ""  # said before the analysis: the report printed, then the error
    assert err.count("\n") == 1 and "pip install 'npbert[plot]'" in err


def test_plot_with_part_of_matplotlib_missing_exits_2_in_one_line(
    tmp_path, capsys, minilm_dir, monkeypatch
):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    path = tmp_path / "positions.png"
    code, _, err = run(capsys, "positions", "--model", minilm_dir, "--plot", path)
    assert code == 2 and not path.exists()
    assert err.count("\n") == 1 and "pip install 'npbert[plot]'" in err, err


def test_bad_plot_name_exits_2_before_loading(capsys, tmp_path):
    code, _, err = run(capsys, "positions", "--model", tmp_path / "nothing", "--plot", "x.gif")
    assert code == 2 and err.count("\n") == 1 and "use a .png, .svg or .pdf" in err


def test_a_plot_name_that_is_a_directory_exits_2_before_loading(capsys, tmp_path):
    (tmp_path / "d.png").mkdir()
    argv = ["positions", "--model", tmp_path / "nothing", "--plot", tmp_path / "d.png"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"--plot {tmp_path / 'd.png'} is a directory" in err


def test_a_family_without_a_position_table_says_so(capsys, monkeypatch):
    # The families being added (issue 10) have position_embeddings None and their config's
    # model_type; rotary models compute positions in attention.
    weights = SimpleNamespace(
        position_embeddings=None,
        config=SimpleNamespace(model_type="modernbert"),
        source={"model": "some/rotary-model"},
    )
    monkeypatch.setattr(npbert, "load_weights", lambda *args, **kwargs: weights)
    code, out, err = run(capsys, "positions", "--model", "some/rotary-model")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "modernbert has no learned position table" in err


def test_distilbert_with_sinusoidal_positions_comes_out_sinusoidal(capsys):
    if not DISTILBERT.is_dir():
        pytest.skip(f"{DISTILBERT.relative_to(ROOT)} is not made yet (scripts/make_goldens.py)")
    code, out, _ = run(capsys, "positions", "--model", DISTILBERT, "--json")
    assert code == 0
    figures = json.loads(out)
    assert figures["tables"]["model"]["fit"]["r2_adjusted"] >= 0.999
    assert figures["verdict"] == "sinusoidal"
    table = npbert.load_weights(DISTILBERT).position_embeddings  # as transformers stored it
    # transformers computes the table in float64 and stores it as float32, as npbert's is cast
    np.testing.assert_array_equal(table, sinusoidal_table(*table.shape).astype(np.float32))


def test_the_docs_figure_is_a_plot_of_the_checkpoint():
    """docs/positions.md shows all-MiniLM-L6-v2's figure (its printed figures are checked
    against the command by tests/test_docs.py)."""
    page = (ROOT / "docs" / "positions.md").read_text()
    figure = re.search(r"!\[[^]]*\]\(([^)]+\.png)\)", page)[1]
    assert 20_000 < (ROOT / "docs" / figure).stat().st_size < 200_000


def test_robertas_padding_rows_are_left_out(capsys):
    data = Path(__file__).parent / "data"
    code, out, _ = run(capsys, "positions", "--model", data / "tiny-roberta", "--json")
    figures = json.loads(out)
    assert code == 0 and figures["first_row"] == 2 and figures["shape"] == [64, 32]


def test_a_pretraining_length_past_the_table_is_refused_and_the_default_fits_it(capsys):
    """It was capped without a word, and --json reported the capped length as given."""
    code, _, err = run(capsys, "positions", "--model", TINY, "--pretraining-length", "100000")
    assert code == 2
    assert "--pretraining-length 100000: give 1 to the table's 128 positions" in err
    table = np.random.default_rng(5).normal(size=(40, 8))  # shorter than the default, 128
    assert analyse(table)["pretraining_length"] == 40
    assert analyse(table, pretraining_length=40)["pretraining_length"] == 40
    with pytest.raises(npbert.InputError, match="from 1 to the table's 40 rows, not 41"):
        analyse(table, pretraining_length=41)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="Linux's /proc")
def test_a_plot_that_cannot_be_written_leaves_no_report(capsys):
    """The report used to be printed (27 KB of JSON for a script to read), then exit 2."""
    plot = "/proc/npbert-positions.png"  # a directory no one may create a file in, root too
    code, out, err = run(capsys, "positions", "--model", TINY, "--json", "--plot", plot)
    assert code == 2 and out == "" and f"--plot {plot}" in err, err


def test_an_analysis_error_is_not_put_on_the_pretraining_length(tmp_path, capsys):
    """Every error of the analysis was said as --pretraining-length's, given or not."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(TINY, tmp_path / "m")
    tensors = load_file(str(TINY / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("position_embeddings.weight"))
    tensors[name][3, 0] = np.nan
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    code, _, err = run(capsys, "positions", "--model", tmp_path / "m")
    assert code == 2 and "pretraining" not in err and "non-finite" in err, err
