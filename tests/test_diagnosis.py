"""compare names the bug: each known porting bug, made here by a small port of its own (not by
npbert's catalog), is named first by compare's diagnosis, from the stages and from the output
alone; correct ports pass with no diagnosis, and wrong ports of no known kind get none."""

import dataclasses
import json

import numpy as np
import pytest
from conftest import DATA, load_golden

import npbert
from npbert.cli import main
from npbert.layer.inputs import prepare_inputs
from npbert.verify import compare


def inputs_for(w, *, batch=4, length=24, pair=False, padded=False, seed=44):
    """Random ids (B, L) of ordinary words; token types, a pair's second half 1; the mask,
    every sequence but the first padded on the right."""
    config = w.config
    rng = np.random.default_rng(seed)
    ids = rng.integers(8, config.vocab_size, (batch, length))
    mask = np.ones((batch, length), np.int64)
    if padded:
        for row in range(1, batch):
            mask[row, length - 2 * row :] = 0
        ids = np.where(mask == 1, ids, config.pad_token_id)
    types = np.zeros_like(ids)
    if pair and config.type_vocab_size > 1:
        types[:, length // 2 :] = 1
    return ids, (types * mask if config.type_vocab_size else None), mask


def positions_of(w, ids):
    """The family's positions, counted here: BERT's 0..L-1; RoBERTa's over real tokens from
    padding_idx + 1, padding at padding_idx."""
    config = w.config
    if config.positions == "padded":
        real = ids != config.padding_idx
        return np.cumsum(real, axis=-1) * real + config.padding_idx
    return np.broadcast_to(np.arange(ids.shape[-1]), ids.shape)


def bfloat16(values):
    bits = np.asarray(values, np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def port(w, ids, types, positions, *, eps=None, ddof=0, swap=False, affine=True, dtype=np.float32,
         tables=None, position_table=None, step=None) -> dict:  # fmt: skip
    """The layer (word + token type + position, LayerNorm) as a port writes it, in `dtype`,
    with the mistakes asked for: tables, a function applied to every table first; step, to
    every step's result (a bfloat16 port's rounding)."""
    table = tables or (lambda t: t)
    step = step or (lambda x: x)
    stages = {"word": step(table(w.word_embeddings)[ids].astype(dtype))}
    summed = stages["word"]
    if types is not None:
        stages["token_type"] = step(table(w.token_type_embeddings)[types].astype(dtype))
        summed = step(summed + stages["token_type"])
    if positions is not None:
        rows = w.position_embeddings if position_table is None else position_table
        stages["position"] = step(table(rows)[positions].astype(dtype))
        summed = step(summed + stages["position"])
    stages["sum"] = summed
    mean, variance = summed.mean(-1, keepdims=True), summed.var(-1, ddof=ddof, keepdims=True)
    eps = w.config.layer_norm_eps if eps is None else eps
    normalized = step((summed - mean) / np.sqrt(variance + dtype(eps)))
    gamma, beta = table(w.layer_norm_weight).astype(dtype), table(w.layer_norm_bias).astype(dtype)
    gamma, beta = (beta, gamma) if swap else (gamma, beta)
    out = step(step(normalized * gamma) + beta) if affine else normalized
    return stages | {"normalized": normalized, "embeddings": out}


def sinusoids(rows: int, width: int) -> np.ndarray:
    """The original Transformer's position table, as a port that assumed it computes it."""
    angle = np.arange(rows)[:, None] / 10000 ** (2 * (np.arange(width) // 2) / width)
    return np.where(np.arange(width) % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def sinusoid_halves(rows: int, width: int) -> np.ndarray:
    """fairseq's sinusoidal positions: sines in the first half, cosines in the second."""
    half = width // 2
    rates = np.exp(np.arange(half) * -(np.log(10000) / (half - 1)))
    angle = np.arange(rows)[:, None] * rates[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def tiny(name: str):
    return npbert.load_weights(DATA / name)


@dataclasses.dataclass
class Made:
    """A bug made by a port: the weights, the inputs the reference takes, the port's stages."""

    w: object
    ids: np.ndarray
    types: np.ndarray | None
    mask: np.ndarray
    stages: dict
    layer_mask: np.ndarray | None = None


def made(w, *, pair=False, padded=False, types=None, positions=None, then=None, **mistake):
    """The port's stages for random inputs; types, positions: (right ones, mask) -> the port's
    own; then: (stages, mask) -> stages, a step after the layer."""
    ids, right, mask = inputs_for(w, pair=pair, padded=padded)
    given = right if types is None else types(right, mask)
    place = None if w.config.positions == "none" else positions_of(w, ids)
    place = place if positions is None or place is None else positions(place, mask)
    stages = port(w, ids, given, place, **mistake)
    return Made(w, ids, right, mask, stages if then is None else then(stages, mask))


def dropout(stages, mask, p=0.1):
    keep = np.random.default_rng(1).random(stages["embeddings"].shape) >= p
    return {"embeddings": stages["embeddings"] * keep / np.float32(1 - p)}


def mean_pooled(stages, mask):
    rows = stages["embeddings"]
    return {"embeddings": (rows * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)}


def deberta_unmasked(m):
    w = tiny("tiny-deberta")
    result = made(w, padded=True)
    result.layer_mask = result.mask  # DeBERTa's layer takes it: the port forgot to apply it
    return result


def projection_left_out(m, every_stage=False):
    result = made(tiny("tiny-albert"))
    stages = result.stages if every_stage else {}
    result.stages = stages | {"projected": result.stages["embeddings"]}  # (B, L, E), not H
    return result


def rounded_before_projection(m):
    """A mixed-precision port: the layer's output stored in bfloat16, projected in float32."""
    result = made(tiny("tiny-albert"))
    w, rounded = result.w, bfloat16(result.stages["embeddings"])
    result.stages = {"projected": rounded @ w.projection_weight.T + w.projection_bias}
    return result


def counted_from_0(name: str):
    """RoBERTa's or MPNet's positions as BERT's, 0..L-1 for every token, padding too."""
    return made(
        tiny(name), padded=True, positions=lambda p, mask: np.broadcast_to(np.arange(24), p.shape)
    )


# The entry to name first -> how a port makes it (given all-MiniLM-L6-v2, or a tiny one).
CASES = {
    "layer_norm_eps": lambda m: made(m, pair=True, eps=1e-5),
    "variance_over_h_minus_1": lambda m: made(m, ddof=1),
    "gamma_beta_swapped": lambda m: made(m, swap=True),
    "layer_norm_affine_left_out": lambda m: made(m, affine=False),
    "token_types_all_0": lambda m: made(m, pair=True, types=lambda t, mask: np.zeros_like(t)),
    "token_types_all_1": lambda m: made(m, types=lambda t, mask: np.ones_like(t)),
    "token_types_left_out": lambda m: made(m, pair=True, types=lambda t, mask: None),
    "token_types_from_another_input": lambda m: made(m, padded=True, types=lambda t, mask: mask),
    "token_types_from_another_input ": lambda m: made(  # the first sequence's, for all
        m, pair=True, padded=True, types=lambda t, mask: np.broadcast_to(t[:1], t.shape)
    ),
    "positions_offset": lambda m: made(m, positions=lambda p, mask: p + 1),
    "positions_offset ": lambda m: made(  # RoBERTa's counted from 0
        tiny("tiny-roberta"), positions=lambda p, mask: np.broadcast_to(np.arange(24), p.shape)
    ),
    "padding_counted_in_positions": lambda m: made(
        tiny("tiny-roberta"),
        padded=True,
        positions=lambda p, mask: np.broadcast_to(np.arange(24) + 2, p.shape),
    ),
    "sinusoidal_positions": lambda m: made(m, position_table=sinusoids(512, 384)),
    "sinusoidal_positions ": lambda m: made(m, position_table=sinusoid_halves(512, 384)),
    "layer_norm_eps ": lambda m: made(tiny("tiny-roberta"), padded=True, eps=1e-12),
    "ids_offset": lambda m: ids_offset(m),
    "tables_narrowed": lambda m: made(m, tables=lambda t: t.astype(np.float16)),
    "tables_narrowed ": lambda m: made(m, tables=bfloat16),
    "computed_narrow": lambda m: made(m, dtype=np.float16),
    "computed_narrow ": lambda m: made(m, step=bfloat16),
    "output_narrowed": lambda m: made(
        m, then=lambda s, mask: {"embeddings": bfloat16(s["embeddings"])}
    ),
    "padding_rows_zeroed": lambda m: made(
        m, padded=True, then=lambda s, mask: {"embeddings": s["embeddings"] * mask[..., None]}
    ),
    "padding_rows_not_zeroed": deberta_unmasked,
    "word_scale": lambda m: made(tiny("tiny-big-bird")),  # rescale_embeddings left out
    "projection_left_out": projection_left_out,
    "projection_left_out ": lambda m: projection_left_out(m, every_stage=True),
    "output_narrowed_before_projection": rounded_before_projection,
    "positions_offset  ": lambda m: counted_from_0("tiny-roberta"),
    "positions_offset   ": lambda m: counted_from_0("tiny-mpnet"),
    "dropout_left_on": lambda m: made(m, then=dropout),
    "pooled": lambda m: made(m, padded=True, then=mean_pooled),
}
STAGES_ONLY = {
    "projection_left_out",
    "projection_left_out ",
}  # an .npy of (B, L, E) is the layer's own output


def ids_offset(m):
    result = made(m)
    result.ids = result.ids - 1  # the port looked up ids + 1
    return result


def diagnosis(result: Made, candidate: dict) -> tuple[list[str], dict]:
    """compare's verdict on the candidate, with the inputs the reference took, and the names
    of its diagnosis."""
    w = result.w
    arguments = (w, result.ids, result.types, None, result.layer_mask)
    references = [
        npbert.embed_stages(*arguments, dtype=dtype, project=True)
        for dtype in (np.float64, np.float32)
    ]
    used = prepare_inputs(w.config, *arguments[1:])
    inputs = {"input_ids": used.input_ids, "token_type_ids": used.token_type_ids,
              "position_ids": used.position_ids, "attention_mask": used.attention_mask}  # fmt: skip
    report = compare(candidate, *references, inputs=inputs, attention_mask=result.mask, weights=w)
    return [entry["name"] for entry in report["diagnosis"]], report


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return npbert.load_weights(minilm_dir)


@pytest.mark.parametrize("given", ["stages", "output"])
@pytest.mark.parametrize("expected", CASES)
def test_each_known_bug_is_named_first(minilm, expected, given):
    if given == "output" and expected in STAGES_ONLY:
        pytest.skip("the output alone cannot tell it")
    result = CASES[expected](minilm)
    stages = result.stages
    candidate = stages if given == "stages" else {"output": next(iter(stages.values()))}
    if given == "output":
        candidate = {"output": stages.get("embeddings", stages.get("projected"))}
    names, report = diagnosis(result, candidate)
    assert not report["ok"]
    assert names and names[0] == expected.strip(), report["diagnosis"]
    assert report["diagnosis"][0]["says"].startswith("matches ")


def test_correct_ports_pass_with_no_diagnosis(minilm):
    """transformers' own float32 output, a float64 port and one adding in another order."""
    arrays, _ = load_golden("minilm_padded_batch")
    ids, types, mask = arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"]
    result = Made(minilm, ids, types, mask, {})
    ports = {
        "transformers": {"embeddings": arrays["embeddings"]},
        "float64": port(minilm, ids, types, positions_of(minilm, ids), dtype=np.float64),
    }
    summed = port(minilm, ids, None, positions_of(minilm, ids))["sum"]  # W + P
    summed = summed + minilm.token_type_embeddings[types]  # then + T
    centered = summed - summed.mean(-1, keepdims=True)
    normalized = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + np.float32(1e-12))
    ports["(W + P) + T"] = {
        "embeddings": normalized * minilm.layer_norm_weight + minilm.layer_norm_bias
    }
    for name, candidate in ports.items():
        _, report = diagnosis(result, candidate)
        assert report["ok"] and report["diagnosis"] == [], name


@pytest.mark.parametrize("wrong", ["noise", "other rows", "scaled"])
def test_a_wrong_port_of_no_known_kind_gets_no_diagnosis(minilm, wrong):
    result = made(minilm, padded=True)
    out = result.stages["embeddings"]
    rng = np.random.default_rng(3)
    out = {
        "noise": lambda: out + rng.normal(0, 1e-3, out.shape).astype(np.float32),
        "other rows": lambda: out[:, rng.permutation(out.shape[1])],
        "scaled": lambda: out * np.float32(1.01),
    }[wrong]()
    names, report = diagnosis(result, {"output": out})
    assert not report["ok"] and names == [], report["diagnosis"]


def test_the_cli_says_the_diagnosis_and_lists_it_in_json(tmp_path, capsys, minilm, minilm_dir):
    result = made(minilm, pair=True, eps=1e-5)
    np.save(tmp_path / "out.npy", result.stages["embeddings"])
    np.save(tmp_path / "ids.npy", result.ids)
    np.save(tmp_path / "types.npy", result.types)
    argv = ["compare", str(tmp_path / "out.npy"), "--model", str(minilm_dir),
            "--ids-file", str(tmp_path / "ids.npy"),
            "--token-type-ids-file", str(tmp_path / "types.npy")]  # fmt: skip
    assert main(argv) == 1
    text = capsys.readouterr().out
    said = "matches the reference with LayerNorm eps 1e-05 (max |diff| "
    assert f"diagnosis: {said}" in text and "use config.json's layer_norm_eps, 1e-12" in text
    assert main([*argv, "--json"]) == 1
    diagnosis = json.loads(capsys.readouterr().out)["diagnosis"]
    assert diagnosis[0]["name"] == "layer_norm_eps" and diagnosis[0]["value"] == 1e-5
    assert diagnosis[0]["says"].startswith(said) and diagnosis[0]["residual"] < 1e-5


def test_a_candidate_of_another_shape_wrong_in_another_way_too_gets_no_diagnosis():
    """A projected output of the layer's width, and off besides: no mutant of its shape fits,
    and the reference, of another shape, has no distance to be far closer than."""
    result = projection_left_out(None)
    result.stages = {"projected": result.stages["projected"] + np.float32(0.3)}
    names, report = diagnosis(result, result.stages)
    assert not report["ok"] and names == []
