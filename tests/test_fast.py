"""The fast path behind embed() against the readable specification, embed_stages(): within
2e-6, and the same for a text alone or in any batch, on any number of threads. Its distance
from float64 against torch's: tests/test_families.py and tests/test_verify.py."""

import contextlib
import itertools
import mmap

import numpy as np
import pytest
from conftest import DATA, TINY, widened
from hypothesis import given, settings
from hypothesis import strategies as st

import npbert
from npbert.layer import fast, pool, tables
from npbert.layer.cores import cpus
from npbert.verify.tolerances import product_atol

FAST_TOLERANCE = 2e-6  # max |fast - readable|: they round in a different order (npbert.layer.fast)
# Blocks as tuned for speed (npbert.layer.fast.BLOCK, 512 tokens) hold a whole sequence of every
# checkpoint here; smaller ones also cut sequences into pieces and leave a short last block.
BLOCKS = (None, 16, 64)


@contextlib.contextmanager
def blocks_of(tokens: int | None):
    """npbert.layer.fast's blocks of `tokens` (None: as tuned) inside the `with`."""
    tuned = fast.BLOCK
    fast.BLOCK = tokens or tuned
    try:
        yield fast.BLOCK
    finally:
        fast.BLOCK = tuned


@pytest.fixture(scope="module")
def models(minilm_dir):
    return {
        "tiny": npbert.load_weights(TINY),
        "minilm": npbert.load_weights(minilm_dir),
        "bf16": npbert.load_weights(DATA / "tiny-bert-bf16"),
    }


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(["tiny", "minilm", "bf16"]),
    batch=st.integers(1, 5),
    length=st.integers(1, 128),
    seed=st.integers(0, 2**32 - 1),
    positions=st.booleans(),
    block=st.sampled_from(BLOCKS),
)
def test_fast_path_equals_the_readable_one_on_random_ids(
    models, model, batch, length, seed, positions, block
):
    weights = models[model]
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, weights.config.vocab_size, (batch, length))
    types = rng.integers(0, weights.config.type_vocab_size, (batch, length))
    position_ids = rng.integers(0, 128, (batch, length)) if positions else None
    with blocks_of(block):
        fast = npbert.embed(weights, ids, types, position_ids)
    readable = npbert.embed_stages(weights, ids, types, position_ids)["embeddings"]
    assert fast.dtype == np.float32 and fast.shape == readable.shape
    np.testing.assert_allclose(fast, readable, rtol=0, atol=FAST_TOLERANCE)


@pytest.mark.parametrize("model", sorted(p.name for p in DATA.glob("tiny-*")))
def test_the_tolerance_scales_with_the_outputs_size(model):
    # 2e-6 holds for outputs the size real checkpoints give (all-MiniLM-L6-v2's peak at 7);
    # a larger gamma scales the rounding with it. Measured: at most 3 float32 steps of the
    # largest output over 21 checkpoints, scales 10 to 1000, 8 seeds; 4 is what explain allows.
    import dataclasses

    weights = npbert.load_weights(DATA / model)
    if weights.layer_norm_weight is None:  # no norm to scale: the sum is the specification's
        ids = np.random.default_rng(0).integers(5, weights.config.vocab_size, (16, 64))
        readable = npbert.embed_stages(weights, ids)["embeddings"]
        np.testing.assert_array_equal(npbert.embed(weights, ids), readable)
        return
    for seed, scale in itertools.product(range(4), (10.0, 100.0, 1000.0)):
        ids = np.random.default_rng(seed).integers(5, weights.config.vocab_size, (16, 64))
        scaled = weights.layer_norm_weight * scale
        scaled = dataclasses.replace(weights, layer_norm_weight=scaled)
        stages = npbert.embed_stages(scaled, ids)
        readable = stages["embeddings"]
        bound = 4 * np.spacing(np.abs(readable).max())
        if "layer_norm" in stages:  # FNet's Linear follows: what float32 products allow
            normed = stages["layer_norm"]
            bound = product_atol(normed, weights.projection_weight, weights.projection_bias,
                                 4 * float(np.spacing(np.abs(normed).max())))  # fmt: skip
        assert np.abs(npbert.embed(scaled, ids) - readable).max() <= bound, (seed, scale)


def test_fast_path_equals_the_readable_one_on_real_text(models, minilm_dir):
    embedder = npbert.Embedder.from_pretrained(minilm_dir)
    texts = [
        "The quick brown fox jumps over the lazy dog",
        "I am Sinan",
        "this is a test sentence",
        " ".join(["A longer passage about embeddings."] * 60),
    ]
    encoding = embedder.encode(texts, truncation=True)
    fast = npbert.embed(models["minilm"], encoding.input_ids, encoding.token_type_ids)
    readable = npbert.embed_stages(models["minilm"], encoding.input_ids, encoding.token_type_ids)[
        "embeddings"
    ]
    np.testing.assert_allclose(fast, readable, rtol=0, atol=FAST_TOLERANCE)


def test_threads_do_not_change_the_result(models):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30522, (8, 512))
    one = npbert.embed(models["minilm"], ids, threads=1)
    np.testing.assert_array_equal(npbert.embed(models["minilm"], ids, threads=2), one)
    threads = min(7, pool.THREADS_PER_CORE * cpus())  # more than blocks, where allowed
    np.testing.assert_array_equal(npbert.embed(models["minilm"], ids, threads=threads), one)


def test_a_row_does_not_depend_on_its_batch(models):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 30522, (6, 300))
    together = npbert.embed(models["minilm"], ids)
    for b in range(6):
        np.testing.assert_array_equal(npbert.embed(models["minilm"], ids[b]), together[b])


def test_float32_weights_are_memory_mapped_not_copied(models):
    word = models["minilm"].word_embeddings
    base = word
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, mmap.mmap)
    assert not word.flags.writeable


def test_the_output_sits_at_the_word_tables_offset_in_a_page(models):
    # So the lookup's copies never write just past where they read (npbert.layer.kernels.empty); one
    # block's output is too small for it to matter.
    weights = models["minilm"]
    for shape in [(3, 200), (40, 128), (fast.BLOCK + 1, 1)]:
        out = npbert.embed(weights, np.ones(shape, np.int64))
        assert out.shape == (*shape, weights.config.output_size) and out.dtype == np.float32
        assert out.flags.c_contiguous
        table = tables.derived(weights).words
        table = weights.word_embeddings if table is None else table
        assert out.ctypes.data % 4096 == table.ctypes.data % 4096


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 6),
    length=st.integers(2, 300),
    runs=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    block=st.sampled_from(BLOCKS),
)
def test_token_types_in_runs_stay_close_and_batch_invariant(
    models, batch, length, runs, seed, block
):
    # One type per block, a few runs (sentence pairs), or many.
    rng = np.random.default_rng(seed)
    weights = models["minilm"]
    ids = rng.integers(0, weights.config.vocab_size, (batch, length))
    cuts = np.sort(rng.choice(np.arange(1, length), min(runs, length) - 1, replace=False))
    types = np.zeros((batch, length), np.int64)
    for i, cut in enumerate(cuts):
        types[:, cut:] = (i + 1) % 2
    with blocks_of(block):
        together = npbert.embed(weights, ids, types)
        alone = [npbert.embed(weights, ids[b], types[b]) for b in range(batch)]
    readable = npbert.embed_stages(weights, ids, types)["embeddings"]
    np.testing.assert_allclose(together, readable, rtol=0, atol=FAST_TOLERANCE)
    for b in range(batch):
        np.testing.assert_array_equal(alone[b], together[b])


def test_the_centered_word_table_changes_no_bit(minilm_dir):
    # Word rows are centered as they are looked up, or from a table centered once: the same
    # float32 operations, so the same result (npbert.layer.fast's docstring).
    weights = npbert.load_weights(minilm_dir)
    tables.centered_table(weights, "never")
    ids = np.random.default_rng(3).integers(0, 30522, (4, 100))
    types = (np.arange(100) >= 60).astype(np.int64)[None].repeat(4, 0)
    looked_up = npbert.embed(weights, ids, types)
    assert tables.derived(weights).words is None
    tables.centered_table(weights, "always")
    assert tables.derived(weights).words is not None
    np.testing.assert_array_equal(npbert.embed(weights, ids, types), looked_up)
    tables.centered_table(weights, "never")
    assert tables.derived(weights).words is None


def test_the_centered_table_is_made_once_it_pays():
    weights = npbert.load_weights(TINY)  # 87 rows
    npbert.embed(weights, np.ones((1, 80), np.int64))
    assert tables.derived(weights).words is None
    npbert.embed(weights, np.ones((1, 10), np.int64))
    assert tables.derived(weights).words is not None


def test_centered_table_modes_are_checked(models):
    for mode in ("sometimes", np.array(["auto", "never"]), ["auto"]):
        with pytest.raises(npbert.InputError, match="mode must be"):
            tables.centered_table(models["tiny"], mode)
    for other in ("tiny", models["tiny"].config):
        with pytest.raises(npbert.InputError, match="must be npbert's EmbeddingWeights"):
            tables.centered_table(other, "always")


def modified_tiny(tmp_path, change):
    """tiny-bert with change(tensors) applied to its tensors (bert-base-uncased's names)."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(TINY / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    for name in ("config.json", "vocab.txt"):
        shutil.copy(TINY / name, tmp_path / name)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bert"
    return npbert.load_weights(tmp_path)


def test_a_gamma_with_a_zero_is_applied_apart(tmp_path):
    def zero(tensors):
        tensors["bert.embeddings.LayerNorm.gamma"][[0, 7]] = 0.0

    weights = modified_tiny(tmp_path, zero)
    ids = np.random.default_rng(5).integers(0, weights.config.vocab_size, (3, 40))
    fast_out = npbert.embed(weights, ids)
    np.testing.assert_allclose(
        fast_out, npbert.embed_stages(weights, ids)["embeddings"], rtol=0, atol=FAST_TOLERANCE
    )
    assert (fast_out[..., [0, 7]] == weights.layer_norm_bias[[0, 7]]).all()


def test_batches_of_every_size_share_one_pool_of_threads(models):
    """A batch runs on as many threads as it has blocks, up to `threads`: batches of other
    sizes use the same pool, so idle threads do not pile up (a pool per thread count did)."""
    import threading

    weights = models["tiny"]
    most = pool.THREADS_PER_CORE * cpus()  # the most threads a call may ask for
    npbert.embed(weights, np.ones((1, 8), np.int64), threads=2)
    before = threading.active_count()
    with blocks_of(16):  # 1 to 79 sequences of 8 tokens: 1 to 40 blocks
        for batch in range(1, 80, 3):
            npbert.embed(weights, np.ones((batch, 8), np.int64), threads=most)
    assert threading.active_count() - before <= most - 1
    assert len(pool._pool) == 1


CHECKPOINTS = sorted(path.name for path in DATA.glob("tiny-*"))


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_token_comes_out_the_same_in_a_block_of_any_size(name):
    """One-token blocks too: DeBERTa's projection of a single row went through BLAS's
    matrix-vector product, which rounds differently (3.6e-7 here)."""
    from npbert.layer.ragged import prepare

    weights = npbert.load_weights(DATA / name)
    count = fast.BLOCK + 1  # the last block holds one token, in blocks of any size here
    ids = np.random.default_rng(0).integers(5, weights.config.vocab_size, (count, 1))
    ids[ids == weights.config.mask_token_id] = 5  # ESM refuses a text all <mask>
    alone = np.stack([npbert.embed(weights, row) for row in ids])  # (count, 1, E)
    back_to_back = prepare(weights.config, ids[:, 0], np.zeros(count, np.int64), [1] * count)
    for block, threads in itertools.product(BLOCKS, (1, 2)):
        with blocks_of(block):
            np.testing.assert_array_equal(npbert.embed(weights, ids, threads=threads), alone)
            run = fast.embed(weights, back_to_back, project=False, threads=threads)
        if not weights.config.per_text:  # (MobileBERT's texts run one at a time: its trigram)
            np.testing.assert_array_equal(run, alone[:, 0])


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_default_positions_add_the_tables_first_rows_and_change_no_bit(name):
    """With token type 0 (or none) at positions 0..L-1, a sequence adds the (type, position)
    table's first L rows as they lie, with no lookup: the same bits as looking them up. (From
    2, Nystromformer's default, they are looked up: the same bits too.)"""
    from npbert.layer.inputs import prepare_inputs

    weights = npbert.load_weights(DATA / name)
    config = weights.config
    longest = min(config.max_length or 300, 300)  # past blocks of 16 and 64: in pieces
    rng = np.random.default_rng(0)
    for batch, length in ((1, 7), (1, longest), (3, 5), (2, longest)):
        ids = rng.integers(5, config.vocab_size, (batch, length))
        given = (
            np.arange(length) + config.position_offset if config.positions == "absolute" else None
        )
        for block, threads in itertools.product(BLOCKS, (1, 2)):
            with blocks_of(block):
                default = npbert.embed(weights, ids, threads=threads)
                looked_up = npbert.embed(weights, ids, position_ids=given, threads=threads)
                alone = npbert.embed(weights, ids[0], threads=threads)  # (L,): no batch axis
            np.testing.assert_array_equal(default, looked_up)
            np.testing.assert_array_equal(alone, default[0])
        # a view of the table, not a gathered copy (a layer without a norm makes no plan)
        if (
            config.positions == "absolute"
            and not config.position_offset
            and config.norm is not None
        ):
            inputs = prepare_inputs(config, ids[:1], None, None, None)
            plan = fast.Plan.make(weights, tables.derived(weights), inputs, 1, length, fast.BLOCK)
            assert np.shares_memory(plan.tile, plan.added)


def test_texts_back_to_back_gather_their_rows_per_block_not_a_tile_as_big_as_the_output():
    """A shard's texts run as one (N,) sequence: its added rows are gathered a block at a
    time, never into one (N, E) tile; only the default positions are flagged as 0..L-1."""
    from npbert.layer.inputs import prepare_inputs
    from npbert.layer.ragged import prepare

    weights = npbert.load_weights(DATA / "tiny-bert")
    config = weights.config
    lengths = [config.max_length] * 8  # N = 8 * 128 tokens, past any block
    ids = np.full(sum(lengths), 7)
    inputs = prepare(config, ids, np.zeros_like(ids), lengths)
    assert not inputs.positions_from_zero
    plan = fast.Plan.make(weights, tables.derived(weights), inputs, 1, len(ids), fast.BLOCK)
    assert plan.tile is None and plan.rows.shape == (len(ids),)
    assert prepare_inputs(config, ids[:9], None, None, None).positions_from_zero
    assert not prepare_inputs(config, ids[:9], None, np.arange(9), None).positions_from_zero


@pytest.mark.parametrize("family", ["albert", "electra", "roformer"])
def test_a_lone_token_projected_after_the_module_is_the_same_as_in_a_batch(family):
    weights = npbert.load_weights(DATA / f"tiny-{family}")
    alone = npbert.embed(weights, [7], project=True)  # (1, H): BLAS's matrix-vector product
    batch = npbert.embed(weights, [[7, 0], [8, 9]], attention_mask=[[1, 0], [1, 1]], project=True)
    np.testing.assert_array_equal(alone[0], batch[0, 0])


def test_calls_that_grow_the_pool_at_once_all_succeed():
    import threading

    weights = npbert.load_weights(TINY)
    ids = np.random.default_rng(0).integers(5, 87, (64, 64))  # 16 blocks: up to 16 threads
    expected = npbert.embed(weights, ids, threads=1)
    for _ in range(5):  # a race: several tries, each bounded
        pool._pool.clear()
        errors, start = [], threading.Barrier(8, timeout=30)

        def call(threads, start=start, errors=errors):
            start.wait()
            try:
                np.testing.assert_array_equal(npbert.embed(weights, ids, threads=threads), expected)
            except Exception as error:
                errors.append(repr(error))

        most = pool.THREADS_PER_CORE * cpus()  # 8 callers, each asking for another count
        callers = [threading.Thread(target=call, args=(1 + k % most,)) for k in range(8)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
        assert errors == [] and not any(c.is_alive() for c in callers), errors


def test_an_error_in_the_calling_threads_share_stops_and_awaits_the_helpers():
    import threading
    import time

    caller, done = threading.get_ident(), []

    def work(share):
        for block in share:
            if threading.get_ident() == caller:
                raise MemoryError("the caller's block")
            time.sleep(0.005)
            done.append(block)

    with pytest.raises(MemoryError, match="the caller's block"):
        pool.run(work, list(range(200)), 2)
    finished = len(done)
    time.sleep(0.05)
    assert len(done) == finished < 20  # the helper stopped early, and had ended by then


def test_embed_from_an_atexit_handler_runs_on_the_calling_thread(tmp_path):
    # At interpreter exit the pool takes no new work; the calling thread does it all.
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(
        "import atexit, numpy as np, npbert\n"
        f"weights = npbert.load_weights({str(TINY)!r})\n"
        "ids = np.ones((64, 64), np.int64)\n"
        "expected = npbert.embed(weights, ids, threads=1)\n"
        "same = lambda: np.array_equal(npbert.embed(weights, ids, threads=4), expected)\n"
        "atexit.register(lambda: print(same()))\n"
    )
    ran = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "True\n", "")


def _tracked(fail_on=None):
    """A work function over ranges of ints that sleeps per block, raises on `fail_on`, and
    counts the blocks in progress and done."""
    import threading
    import time

    state = {"active": 0, "done": [], "lock": threading.Lock()}

    def work(share):
        for block in share:
            with state["lock"]:
                state["active"] += 1
            try:
                if block == fail_on:
                    raise ValueError("block failed")
                time.sleep(0.02)
                state["done"].append(block)
            finally:
                with state["lock"]:
                    state["active"] -= 1

    return work, state


def test_an_error_in_a_helper_comes_out_once_every_thread_has_stopped():
    work, state = _tracked(fail_on=1)
    with pytest.raises(ValueError, match="block failed"):
        pool.run(work, list(range(60)), 3)
    assert state["active"] == 0 and len(state["done"]) < 30  # the rest were dropped


def test_a_helper_that_cannot_start_leaves_its_work_to_the_others(monkeypatch):
    work, state = _tracked()
    executor = pool.thread_pool(3)
    submitted = []

    def submit(*args):
        if submitted:
            raise RuntimeError("can't start new thread")
        submitted.append(1)
        return type(executor).submit(executor, *args)

    monkeypatch.setattr(executor, "submit", submit)
    pool.run(work, list(range(40)), 3)
    assert state["active"] == 0 and sorted(state["done"]) == list(range(40))


def test_the_callers_numpy_buffer_size_is_left_as_it_was(models, monkeypatch):
    """Blocks of wide rows divide with a one-row ufunc buffer (npbert.layer.fast.row_buffer), set
    on each thread that works and restored as it leaves, after an error too."""
    weights = models["minilm"]  # rows of 384: wide enough
    ids = np.random.default_rng(0).integers(0, 30522, (4, 128))
    assert fast.row_buffer(fast.BLOCK, 384) == 384
    expected = npbert.embed_stages(weights, ids)["embeddings"]
    before = np.getbufsize()
    for threads in (1, 2):
        with np.errstate():
            np.setbufsize(4096)
            output = npbert.embed(weights, ids, threads=threads)
            assert np.getbufsize() == 4096
        np.testing.assert_allclose(output, expected, rtol=0, atol=FAST_TOLERANCE)

    def failing(*args):
        assert np.getbufsize() == 384
        raise MemoryError("in a block")

    monkeypatch.setattr(fast, "normalize_centered", failing)
    with pytest.raises(MemoryError, match="in a block"):
        npbert.embed(weights, ids, threads=1)
    assert np.getbufsize() == before


def test_the_buffer_is_chosen_for_the_rows_that_are_divided(monkeypatch):
    """DeBERTa-v2 projects E -> H inside its layer: the rows normalize divides are H wide."""
    weights = npbert.load_weights(DATA / "tiny-deberta-v2")
    config = weights.config
    assert config.projection == "inside" and config.embedding_size != config.output_size
    widths = []
    monkeypatch.setattr(fast, "row_buffer", lambda rows, width: widths.append(width))
    npbert.embed(weights, np.ones((2, 8), np.int64), threads=1)
    assert widths == [config.output_size]


@pytest.mark.parametrize("name", ["tiny-deberta-v2", "tiny-electra"])
def test_a_projected_token_is_the_same_in_a_batch_of_any_size(tmp_path, name):
    """ELECTRA-small's sizes, E 128 -> H 256: BLAS's matrix product rounded a row differently
    beside 1 to 4 other rows than beside more (OpenBLAS picks its kernel by the shapes). Up
    to 180 tokens: rows in a whole product of PROJECTED and in a padded last one."""
    weights = widened(tmp_path, name, 128, 256)
    ids = np.random.default_rng(1).integers(5, weights.config.vocab_size, (60, 3))
    alone = np.stack([npbert.embed(weights, row, project=True) for row in ids])  # (60, 3, H)
    for batch, block, threads in itertools.product((2, 3, 5, 17, 60), BLOCKS, (1, 2)):
        with blocks_of(block):
            together = npbert.embed(weights, ids[:batch], project=True, threads=threads)
        np.testing.assert_array_equal(together, alone[:batch])


def deberta_initialized(tmp_path, vocab: int, embedding: int, hidden: int):
    """A DeBERTa-v2 with E -> H projected inside the layer, its tables drawn as transformers
    initializes them (normal, std initializer_range 0.02; gamma 1, beta 0)."""
    import json

    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    prefix = "deberta.embeddings."
    tensors = {
        "word_embeddings.weight": rng.normal(0, 0.02, (vocab, embedding)),
        "embed_proj.weight": rng.normal(0, 0.02, (hidden, embedding)),
        "LayerNorm.weight": np.ones(hidden),
        "LayerNorm.bias": np.zeros(hidden),
    }
    save_file(
        {prefix + key: value.astype(np.float32) for key, value in tensors.items()},
        str(tmp_path / "model.safetensors"),
    )
    config = json.loads((DATA / "tiny-deberta-v2" / "config.json").read_text())
    config.update(vocab_size=vocab, embedding_size=embedding, hidden_size=hidden)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return npbert.load_weights(tmp_path)


def test_a_projection_before_the_layer_norm_keeps_the_fast_path_accurate(tmp_path):
    """Projected rows of small weights have a small std, which the LayerNorm divides by: the
    projection's rounding, magnified, had put the fast path 2.9e-6 from float64 here."""
    weights = deberta_initialized(tmp_path, 2000, 128, 768)
    ids = np.arange(2000)[:, None]  # (V, 1): every word
    reference = npbert.embed(weights, ids, dtype=np.float64)
    fast = npbert.embed(weights, ids)
    readable = npbert.embed_stages(weights, ids)["embeddings"]
    np.testing.assert_allclose(fast, readable, rtol=0, atol=FAST_TOLERANCE)
    assert np.abs(fast - reference).max() <= np.abs(readable - reference).max()


def test_at_a_width_of_two_the_fast_path_stays_the_closer_to_float64(tmp_path):
    """A LayerNorm over 2 values, a toy's width: a token whose values nearly agree has a variance
    near eps, and both float32 paths lose digits there, past the 2e-6 that holds between them
    at real widths (npbert.layer.fast); the fast one loses fewer."""
    import json

    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    config = json.loads((TINY / "config.json").read_text())
    rows = {"word": config["vocab_size"], "position": config["max_position_embeddings"],
            "token_type": config["type_vocab_size"]}  # fmt: skip
    tensors = {
        f"bert.embeddings.{name}_embeddings.weight": rng.normal(0, 0.5, (n, 2)).astype(np.float32)
        for name, n in rows.items()
    }
    tensors["bert.embeddings.LayerNorm.gamma"] = rng.normal(1, 0.3, 2).astype(np.float32)
    tensors["bert.embeddings.LayerNorm.beta"] = rng.normal(0, 0.3, 2).astype(np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 2}))
    weights = npbert.load_weights(tmp_path)
    ids = rng.integers(0, rows["word"], (256, 64))
    float64 = npbert.embed(weights, ids, dtype=np.float64)
    fast_error = np.abs(npbert.embed(weights, ids) - float64).max()
    readable_error = np.abs(npbert.embed_stages(weights, ids)["embeddings"] - float64).max()
    assert fast_error <= readable_error, (fast_error, readable_error)
