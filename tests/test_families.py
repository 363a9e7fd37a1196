"""Every family against transformers' own embeddings module, on tiny checkpoints that
transformers wrote (scripts/make_goldens.py; NomicBERT in nomic's own config layout, which
transformers' class does not read, from torch modules composed as nomic's code composes them)."""

import json
import re
import shutil

import numpy as np
import pytest
from conftest import DATA, TESTS, family_golden_names, load_golden
from safetensors.numpy import load_file, save_file

import npbert
from npbert.layer.families import FAMILIES
from npbert.layer.inputs import prepare_inputs
from npbert.verify.tolerances import DEFAULT_ATOL, FLOAT64_ATOL, default_atol, stage_atols, ulps
from npbert.verify.vectors import LONGEST

# as the modules name them (DeBERTa's mask, ESM's attention_mask)
ARGUMENTS = {"input_ids", "token_type_ids", "position_ids", "mask", "attention_mask"}
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
    return request.param, arrays, metadata, weights_for(metadata), _arguments(arrays, metadata)


def _arguments(arrays: dict, metadata: dict) -> dict:
    """The arguments the golden's module was called with, by npbert's names."""
    passed = set(metadata["passed"])
    assert passed <= ARGUMENTS, passed
    kwargs = {name: arrays[name] for name in passed - {"mask"}}
    if "mask" in passed or "attention_mask" in passed:
        kwargs["attention_mask"] = arrays["attention_mask"]
    return kwargs


def test_every_family_has_goldens():
    made = {load_golden(name)[1]["model_type"] for name in family_golden_names()}
    assert made | {"bert"} == set(FAMILIES)  # BERT's: tests/test_goldens.py


def test_config_names_the_family_and_its_settings(golden):
    _, _, metadata, weights, _ = golden
    assert weights.config.model_type == metadata["model_type"]
    if metadata["eps"] is not None:  # Megatron-BERT's layer has no norm
        assert weights.config.layer_norm_eps == metadata["eps"]


def test_output_within_1e_5_of_transformers(golden, record):
    name, arrays, _, weights, kwargs = golden
    output = npbert.embed(weights, **kwargs)
    diff = float(np.abs(output - arrays["embeddings"]).max())
    record(f"{name}: max |npbert - transformers| float32 = {diff:.3g}")
    # 1e-5, or 4 float32 steps where outputs are large (tiny-electra-small's reach 40)
    assert output.shape == arrays["embeddings"].shape and diff <= default_atol(output)


def test_projection_is_what_the_first_layer_receives(golden):
    _, arrays, _, weights, kwargs = golden
    if "projected" not in arrays:
        assert weights.config.projection != "after"
        return
    # Each within what correct products of the precision can differ by, from the float64
    # reference: the projection's length and size decide how far (product_atol).
    reference = npbert.embed_stages(weights, **kwargs, project=True, dtype=np.float64)
    precisions = ((np.float32, DEFAULT_ATOL), (np.float64, FLOAT64_ATOL))
    float32, float64 = (stage_atols(reference, weights, *p)["projected"] for p in precisions)
    output = npbert.embed(weights, **kwargs, project=True)
    assert output.shape == arrays["projected"].shape
    for projected in (output, arrays["projected"]):
        np.testing.assert_allclose(projected, reference["projected"], rtol=0, atol=float32)
    np.testing.assert_allclose(reference["projected"], arrays["projected_float64"], atol=float64)


def test_lookups_and_sum_are_bit_identical(golden):
    name, arrays, _, weights, kwargs = golden
    stages = npbert.embed_stages(weights, **kwargs)
    for stage in ("word", "token_type", "position"):
        assert (stage in stages) == (stage in arrays), f"{name}: {stage}"
        if stage in arrays:
            ours = np.broadcast_to(stages[stage], arrays[stage].shape)  # positions may be (L, E)
            np.testing.assert_array_equal(ours, arrays[stage], err_msg=f"{name}: {stage}")
    summed = stages.get("sum", stages["word"])  # one table: nothing is added
    if "trigram" in arrays:  # MobileBERT's rows side by side
        np.testing.assert_array_equal(stages["trigram"], arrays["trigram"])
    if "embedding_transformation" in arrays:  # a product first: BLAS and torch sum otherwise
        for stage in ("embedding_transformation", "sum"):
            np.testing.assert_allclose(stages[stage], arrays[stage], atol=1e-6, err_msg=stage)
    elif "sum" in arrays:  # (not where ESM's token dropout rescales W and no norm shows it)
        np.testing.assert_array_equal(summed, arrays["sum"], err_msg=f"{name}: sum")
    assert ("embed_proj" in stages) == ("embed_proj" in arrays)
    if "embed_proj" in arrays:  # a matrix product: BLAS and torch sum in their own order
        np.testing.assert_allclose(stages["embed_proj"], arrays["embed_proj"], atol=1e-6)


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
    # 2e-6, or up to 4 float32 steps of the largest output (tests/test_fast.py)
    np.testing.assert_allclose(fast, readable, rtol=0, atol=default_atol(readable, base=2e-6))
    for row in range(fast.shape[0]):
        alone = {k: v[row] for k, v in kwargs.items()}
        np.testing.assert_array_equal(npbert.embed(weights, **alone), fast[row])


def _by_checkpoint() -> dict[str, list[str]]:
    names = {}
    for name in family_golden_names():
        names.setdefault(load_golden(name)[1]["model"], []).append(name)
    return names


BY_CHECKPOINT = _by_checkpoint()


@pytest.mark.parametrize(("model", "names"), BY_CHECKPOINT.items(), ids=BY_CHECKPOINT)
def test_fast_path_is_about_as_accurate_as_torch(model, names, record):
    """Distance from the float64 reference over a checkpoint's goldens: npbert's fast path
    against transformers' float32 module. On these tiny tables (a few thousand values) the
    largest error is one draw, so its bound is looser than the median's. npbert's figures
    are computed here, torch's on the machine that made the goldens: the LayerNorm's sum of
    squares rounds otherwise under another BLAS kernel (OpenBLAS's Katmai put tiny-nomic-bert's
    median 5% above torch's), hence 10% and 50%. On all-MiniLM-L6-v2: tests/test_verify.py;
    on the bench's larger samples npbert is below torch on both."""
    ours, theirs, reference = [], [], []
    for name in names:
        arrays, metadata = load_golden(name)
        weights, kwargs = weights_for(metadata), _arguments(arrays, metadata)
        ours.append(npbert.embed(weights, **kwargs).ravel())
        theirs.append(arrays["embeddings"].ravel())
        reference.append(npbert.embed(weights, **kwargs, dtype=np.float64).ravel())
    ours, theirs, reference = map(np.concatenate, (ours, theirs, reference))
    ulp = {"npbert": ulps(ours, reference), "torch": ulps(theirs, reference)}
    worst = {
        who: np.abs(out - reference).max() for who, out in [("npbert", ours), ("torch", theirs)]
    }
    for who in ulp:
        record(f"{model}: {who} median ULPs {np.median(ulp[who]):.3f}, max {worst[who]:.3g}")
    assert np.median(ulp["npbert"]) <= 1.1 * np.median(ulp["torch"])
    # or at most one float32 step past torch's largest: one draw among a few thousand values
    assert worst["npbert"] <= 1.5 * worst["torch"] or ulp["npbert"].max() <= ulp["torch"].max() + 1


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


# --- everything else follows the family ---------------------------------------------------


def cli(capsys, *argv):
    from npbert.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_shows_robertas_derived_positions(capsys):
    code, out, _ = cli(capsys, "explain", "I am Sinan", "--model", DATA / "tiny-roberta")
    assert code == 0, out
    assert "LayerNorm((W + T) + P), P at padding_idx + 1" in out
    assert "numbers the tokens that are not padding from padding_idx + 1 = 2" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    table = [r for r in rows if len(r) == 5 and r[0].isdigit()]  # i, token, id, type, position
    assert [int(r[-1]) for r in table] == list(range(2, 2 + len(table)))
    assert "(equal within 1e-05)" in out


def test_explain_shows_the_projection_and_no_missing_tables(capsys):
    code, out, _ = cli(capsys, "explain", "I am Sinan", "--model", DATA / "tiny-deberta-v2")
    assert code == 0, out
    assert "Segment" not in out and "Position embeddings" not in out
    assert "Projection from width 16 to the hidden size 32, before the LayerNorm" in out
    assert "(equal within 1e-05)" in out
    code, out, _ = cli(capsys, "explain", "I am Sinan", "--model", DATA / "tiny-albert")
    assert code == 0 and "32, after the layer (a learned Linear): what the first" in out


def test_inspect_names_the_family_and_every_tensor_it_reads(capsys):
    code, out, _ = cli(capsys, "inspect", DATA / "tiny-albert")
    assert code == 0
    assert "albert: LayerNorm((W + T) + P) at width E, then Linear(E -> H)" in out
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        assert f"albert.embeddings.{name}.weight" in out
    assert "albert.encoder.embedding_hidden_mapping_in.weight" in out
    assert "albert.encoder.embedding_hidden_mapping_in.bias" in out
    code, out, _ = cli(capsys, "inspect", DATA / "tiny-modernbert")
    assert "model.embeddings.norm.weight" in out and "norm.bias" not in out


def test_embed_project_gives_the_hidden_size(capsys, tmp_path):
    out = tmp_path / "a.npy"
    code, _, _ = cli(capsys, "embed", "I am", "--model", DATA / "tiny-electra", "--project",
                     "--out", out)  # fmt: skip
    assert code == 0 and np.load(out).shape[-1] == 32
    weights = weights_for({"model": "tests/data/tiny-electra"})
    assert weights.config.embedding_size == 16 and weights.config.hidden_size == 32


def test_compare_names_the_families_stage(capsys, tmp_path):
    # A port that numbers RoBERTa's positions from 0, as BERT does, fails at "position".
    weights = weights_for({"model": "tests/data/tiny-roberta"})
    ids = np.array([[0, 44, 351, 342, 273, 2]])
    stages = npbert.embed_stages(weights, ids, position_ids=np.arange(6))
    np.savez(tmp_path / "bert-positions.npz", **stages)
    np.save(tmp_path / "ids.npy", ids)
    argv = ("--model", DATA / "tiny-roberta", "--ids-file", tmp_path / "ids.npy", "--json")
    code, out, _ = cli(capsys, "compare", tmp_path / "bert-positions.npz", *argv)
    assert code == 1 and '"first_disagreeing_stage": "position"' in out
    np.savez(tmp_path / "right.npz", **npbert.embed_stages(weights, ids))
    code, out, _ = cli(capsys, "compare", tmp_path / "right.npz", *argv)
    assert code == 0, out


VECTOR_FAMILIES = [
    "roberta",
    "albert",
    "deberta",
    "deberta-v2",
    "modernbert",
    "funnel",
    "distilbert",
]


@pytest.mark.parametrize("family", VECTOR_FAMILIES)
def test_vectors_follow_the_family(capsys, tmp_path, family):
    out = tmp_path / "vectors"
    code, _, err = cli(capsys, "vectors", "--model", DATA / f"tiny-{family}", "--out", out)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    weights = weights_for({"model": f"tests/data/tiny-{family}"})
    assert manifest["model_type"] == weights.config.model_type
    # the checkpoint's own settings, which the family's formula leaves open
    config = manifest["config"]
    assert config["padding_idx"] == weights.config.padding_idx
    assert config["max_position_embeddings"] == weights.config.max_position_embeddings
    assert config["type_vocab_size"] == weights.config.type_vocab_size
    assert config["layer_norm_bias"] == (weights.layer_norm_bias is not None)
    expected = set(npbert.embed_stages(weights, [[1, 2]], project=True))
    assert set(manifest["stages"]) == expected
    for case in manifest["cases"].values():
        folder = out / next(iter(case["files"])).split("/")[0]
        arrays = {p.stem: np.load(p) for p in folder.glob("*.npy")}
        assert ("token_type_ids" in arrays) == bool(weights.config.type_vocab_size)
        kwargs = {k: arrays[k] for k in ("token_type_ids", "position_ids") if k in arrays}
        mask = arrays.get("attention_mask")
        reference = npbert.embed(weights, arrays["input_ids"], **kwargs, attention_mask=mask,
                                 dtype=np.float64)  # fmt: skip
        np.testing.assert_array_equal(arrays["embeddings.float64"], reference)
    assert "pair" in manifest["cases"]  # token types of a model without a table go unused
    longest = manifest["cases"]["longest"]  # as long as it says (a layer without limit: 512)
    length = np.load(out / "longest" / "input_ids.npy").shape[1]
    assert length == min(weights.config.max_length or 512, LONGEST)
    assert f": {length} tokens" in longest["description"], longest["description"]


def test_vectors_of_a_bert_of_one_token_type_leave_the_pair_out(capsys, tmp_path):
    """BERT's tokenizer gives sentence B token type 1; a table of one row takes no pairs."""
    shutil.copytree(DATA / "tiny-bert", tmp_path / "m")
    tensors = load_file(tmp_path / "m" / "model.safetensors")
    table = "bert.embeddings.token_type_embeddings.weight"
    save_file(tensors | {table: tensors[table][:1]}, tmp_path / "m" / "model.safetensors")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"type_vocab_size": 1}))
    code, _, err = cli(capsys, "vectors", "--model", tmp_path / "m", "--out", tmp_path / "v")
    assert code == 0, err
    cases = json.loads((tmp_path / "v" / "manifest.json").read_text())["cases"]
    assert "pair" not in cases and {"seed0", "padded_batch", "every_token_type"} <= set(cases)


@pytest.mark.slow
def test_vectors_of_a_model_allowing_millions_of_tokens_stop_at_8192(capsys, tmp_path):
    shutil.copytree(DATA / "tiny-modernbert", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(
        json.dumps({**config, "max_position_embeddings": 10**7})
    )
    code, _, err = cli(capsys, "vectors", "--model", tmp_path / "m", "--out", tmp_path / "v")
    assert code == 0, err  # it built a text of 10^7 passages, and ran out of memory
    assert np.load(tmp_path / "v" / "longest" / "input_ids.npy").shape == (1, LONGEST)
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert "8192 tokens (the model allows 10000000)" in manifest["cases"]["longest"]["description"]


def test_vectors_leave_out_special_tokens_the_word_table_has_no_row_for(capsys, tmp_path):
    # A token added to the tokenizer without resizing the model: common, and no row to test.
    from tokenizers import AddedToken, Tokenizer

    shutil.copytree(DATA / "tiny-electra", tmp_path / "m")
    tokenizer = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken("<extra>", special=True)])
    tokenizer.save(str(tmp_path / "m" / "tokenizer.json"))
    rows = npbert.load_weights(tmp_path / "m").config.vocab_size
    assert tokenizer.token_to_id("<extra>") >= rows
    code, _, err = cli(capsys, "vectors", "--model", tmp_path / "m", "--out", tmp_path / "v")
    assert code == 0, err  # it failed on the case's input_ids, naming no token
    ids = np.load(tmp_path / "v" / "special_tokens" / "input_ids.npy")
    assert ids.max() < rows and len(set(ids[0].tolist())) > 1
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    description = manifest["cases"]["special_tokens"]["description"]
    assert "(1 past the word table left out)" in description


def bpe_without_unknown_token(directory, letters: str):
    """tiny-bert's tensors with a BPE tokenizer that knows only `letters` and has no unknown
    token: the tokenizers library drops every other character."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    shutil.copytree(DATA / "tiny-bert", directory, ignore=shutil.ignore_patterns("vocab.txt"))
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    vocab |= {letter: 4 + i for i, letter in enumerate(letters)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def test_vectors_take_a_tokenizer_that_drops_what_it_cannot_encode(capsys, tmp_path):
    model = bpe_without_unknown_token(tmp_path / "m", "abo")  # "x" encodes to [CLS] [SEP]
    code, _, err = cli(capsys, "vectors", "--model", model, "--out", tmp_path / "v")
    assert code == 0, err  # a traceback: "0 is not in list", finding the special tokens
    ids = np.load(tmp_path / "v" / "repeated_tokens" / "input_ids.npy")[0]
    assert ids[0] == 2 and ids[-1] == 3 and set(ids[1:-1].tolist()) <= {4, 5, 6}


def test_vectors_refuse_a_tokenizer_that_gives_text_no_tokens(capsys, tmp_path):
    model = bpe_without_unknown_token(tmp_path / "m", "1")
    code, _, err = cli(capsys, "vectors", "--model", model, "--out", tmp_path / "v")
    assert code == 2 and "to special tokens alone ([CLS] [SEP])" in err and err.count("\n") == 1
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("family", VECTOR_FAMILIES)
def test_compare_passes_a_vectors_padded_batch_given_its_input_files(capsys, tmp_path, family):
    model = DATA / f"tiny-{family}"
    assert cli(capsys, "vectors", "--model", model, "--out", tmp_path / "v")[0] == 0
    case = tmp_path / "v" / "padded_batch"
    assert 0 in np.load(case / "attention_mask.npy")  # padded: DeBERTa zeroes those rows
    files = [
        "--ids-file",
        case / "input_ids.npy",
        "--attention-mask-file",
        case / "attention_mask.npy",
    ]
    if (case / "token_type_ids.npy").exists():
        files += ["--token-type-ids-file", case / "token_type_ids.npy"]
    code, out, err = cli(
        capsys, "compare", case / "embeddings.float32.npy", "--model", model, *files
    )
    assert code == 0 and "min token cosine 1.0" in out, out + err


@pytest.mark.parametrize("family", ["roformer", "bert", "deberta", "roberta"])
def test_vectors_of_a_checkpoint_without_a_tokenizer_are_of_ids(capsys, tmp_path, family):
    """RoFormer's tokenizer is not one the tokenizers library reads: its layer's vectors were
    refused ("has no tokenizer.json"), though they need no text."""
    model = tmp_path / "m"
    shutil.copytree(DATA / f"tiny-{family}", model)
    for name in ("tokenizer.json", "vocab.txt"):
        (model / name).unlink(missing_ok=True)
    code, _, err = cli(capsys, "vectors", "--model", model, "--out", tmp_path / "v")
    assert code == 0 and err.count("\n") == 1, err
    assert "the vectors are cases of random ids alone, none of text" in err
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    weights = npbert.load_weights(model)
    assert manifest["tokenizer"] is None and "random_ids" in manifest["cases"]
    assert ("every_token_type" in manifest["cases"]) == bool(weights.config.type_vocab_size)
    length = np.load(tmp_path / "v" / "longest" / "input_ids.npy").shape[1]
    assert length == min(weights.config.max_length or 512, LONGEST)
    for name in manifest["cases"]:
        case = tmp_path / "v" / name
        given = {
            key: np.load(case / f"{key}.npy")
            for key in ("token_type_ids", "attention_mask")
            if (case / f"{key}.npy").exists()
        }
        files = ["--ids-file", case / "input_ids.npy"]
        for key in given:
            files += [f"--{key.replace('_', '-')}-file", case / f"{key}.npy"]
        code, out, err = cli(capsys, "compare", case / "embeddings.float32.npy", "--model", model,
                             *files)  # fmt: skip
        assert code == 0 and "PASS" in out, (name, out + err)
        ids = np.load(case / "input_ids.npy")
        np.testing.assert_array_equal(
            np.load(case / "embeddings.float64.npy"),
            npbert.embed(weights, ids, **given, dtype=np.float64),
        )
    if weights.config.pad_token_id is not None:
        padded = tmp_path / "v" / "padded"
        pads = [weights.config.pad_token_id] * 2
        assert np.load(padded / "input_ids.npy")[0, -2:].tolist() == pads
        assert np.load(padded / "attention_mask.npy").tolist() == [[1] * 6 + [0] * 2]
        zeroed = (np.load(padded / "embeddings.float64.npy")[0, -2:] == 0).all()
        assert zeroed == weights.config.family.masks_padding  # DeBERTa's layer zeroes them
    same = "rows the same" in manifest["cases"]["repeated_tokens"]["description"]
    assert same == (weights.config.positions == "none")


def test_roformer_text_is_refused_by_name_and_its_vectors_are_of_ids(capsys, tmp_path):
    """The tokenizer.json transformers saves for RoFormer has BERT's pre-tokenizer in place of
    jieba, which it runs in Python: read here, it gave [UNK] for Chinese words."""
    from tokenizers import BertWordPieceTokenizer

    model = tmp_path / "m"
    shutil.copytree(DATA / "tiny-roformer", model)
    BertWordPieceTokenizer(str(DATA / "tiny-bert" / "vocab.txt")).save(
        str(model / "tokenizer.json")
    )
    jieba = "roformer: RoFormer's tokenizer splits words with jieba, which the tokenizers library"
    with pytest.raises(npbert.InputError, match=re.escape(jieba)):
        npbert.Embedder.from_pretrained(model)
    code, _, err = cli(capsys, "embed", "hello", "--model", model)
    assert code == 2 and err.startswith(f"npbert: error: {jieba}") and err.count("\n") == 1, err
    assert "npbert takes its ids alone (--ids-file)" in err
    code, _, err = cli(capsys, "vectors", "--model", model, "--out", tmp_path / "v")
    assert code == 0 and err.startswith(f"npbert: warning: {jieba}"), err
    assert "the vectors are cases of random ids alone" in err and err.count("\n") == 1
    assert json.loads((tmp_path / "v" / "manifest.json").read_text())["tokenizer"] is None


TOKENIZED = sorted(p.name for p in DATA.glob("tiny-*") if (p / "tokenizer.json").exists())


@pytest.mark.parametrize("name", TOKENIZED)
def test_embed_each_gives_each_text_as_alone_for_every_family(name):
    # embed_each embeds a batch's tokens back to back (npbert.layer.ragged): no padding, and bit for
    # bit what each text gives alone, whatever the family numbers positions from
    embedder = npbert.Embedder.from_pretrained(DATA / name)
    texts = ["hello world", "a", "this is a longer sentence of text"]
    for output, text in zip(embedder.embed_each(texts, batch_size=2), texts, strict=True):
        alone = embedder(text)
        assert output.tokens == alone.tokens
        for key in ("embeddings", "input_ids", "token_type_ids", "attention_mask"):
            np.testing.assert_array_equal(getattr(output, key), getattr(alone, key))
