"""What conformance vectors hold, for the people who read them: FORMAT.md and each stage's
meaning, written beside the vectors.
"""

from npbert.verify.tolerances import DEFAULT_ATOL, FLOAT64_ATOL, STEPS

RANDOM_IDS = 0  # the seed of the ids drawn for a checkpoint without a tokenizer


# The least atol for an implementation in each precision: more where a stage's values are
# large (default_atol: STEPS steps of the precision at the largest), given file by file.
BASE_ATOL = {"float32": DEFAULT_ATOL, "float64": FLOAT64_ATOL}


STAGE_MEANING = {
    "word": "word_embeddings[input_ids], (B, L, E)",
    "token_type": "token_type_embeddings[token_type_ids], (B, L, E)",
    "position": "position_embeddings[position_ids], (L, E) shared by the batch, or (B, L, E)",
    "sum": "the rows added in the order of the manifest's formula (BigBird's word rows "
    "times word_scale; ESM's after token dropout; MobileBERT's Linear's output), (B, L, E)",
    "trigram": "MobileBERT's next, this and previous word rows side by side, (B, L, 3E)",
    "embedding_transformation": "MobileBERT's Linear of its trigram (or word rows) to H",
    "embed_proj": "DeBERTa's Linear (no bias) from E to the hidden size H, before the norm",
    "normalized": "(x - mean) / sqrt(var + layer_norm_eps) over the last axis, before gamma/beta",
    "layer_norm": "FNet's normalized * gamma + beta, before the Linear its layer ends with",
    "embeddings": "the layer's output, the last step of the manifest's formula: normalized * "
    "gamma (+ beta) in most families (DeBERTa, ESM: times attention_mask; MobileBERT's NoNorm: "
    "sum * gamma + beta; FNet: its Linear of layer_norm; without a norm: the sum)",
    "projected": "the Linear to the hidden size H that ALBERT, ELECTRA, RoFormer, ConvBERT and "
    "RemBERT apply after the layer: what the first encoder layer receives, (B, L, H)",
}


FORMAT = f"""# npbert conformance vectors

One folder per case. Each holds the inputs

    input_ids.npy       (B, L) int64
    token_type_ids.npy  (B, L) int64, where the family has a token-type table
    position_ids.npy    (L,) or (B, L) int64, the positions looked up (RoBERTa's are derived
                        from the padding), where the family has a position table
    attention_mask.npy  (B, L) int64, for cases made from text and "padded" (0 marks padding);
                        a case without one is embedded with no mask: every token counts as
                        real, a pad id too (DeBERTa zeroes no row there)

(a checkpoint without a tokenizer, manifest.json's "tokenizer" null, gets cases of ids
alone, drawn at random from the word table with NumPy's default_rng({RANDOM_IDS}))
and every stage of the family's embedding layer that it has (manifest.json: "stages"), in
float32 and in float64:

    word.*.npy          word_embeddings[input_ids], as stored           (B, L, E)
    token_type.*.npy    token_type_embeddings[token_type_ids]           (B, L, E)
    position.*.npy      position_embeddings[position_ids]               (L, E) or (B, L, E)
    sum.*.npy           the rows, added in the family's order           (B, L, E)
                        (BigBird's word rows times config's word_scale, sqrt(H) where it
                        rescales: its word file holds them unscaled; ESM's after its token
                        dropout; MobileBERT's Linear's output plus P and T, at width H)
    trigram.*.npy       MobileBERT's [next, this, previous] word rows   (B, L, 3E)
    embedding_transformation.*.npy  MobileBERT's Linear of them to H    (B, L, H)
    embed_proj.*.npy    DeBERTa's projection to the hidden size, before the norm (B, L, H)
    normalized.*.npy    (x - mean) / sqrt(var + eps), over the last axis (LayerNorm only)
    layer_norm.*.npy    FNet's normalized * gamma + beta, before its last Linear
    embeddings.*.npy    the output: normalized * gamma (+ beta); MobileBERT's NoNorm
                        sum * gamma + beta; FNet's Linear of layer_norm; the sum where
                        the layer has no norm; times attention_mask in DeBERTa and ESM
    projected.*.npy     the projection to the hidden size after the layer (ALBERT,
                        ELECTRA, RoFormer, ConvBERT, RemBERT): what the first encoder
                        layer receives

float64 files are computed in float64 from the stored weights: the exact reference. float32
files are what a float32 implementation should produce. Padding positions are embedded like
any other (only DeBERTa's and ESM's embedding layers use the attention mask: they zero them,
and ESM counts its share of <mask> tokens over the tokens it keeps).
B is the batch, L the tokens a sequence, E the width of the tables and H the hidden size
(E but where a projection maps E to H). manifest.json gives the model_type and its formula
(as this checkpoint computes it: the tables it has, in the order it adds them), the
checkpoint's own settings in
"config" (the sizes; padding_idx, from which RoBERTa's positions start; projection: "inside"
for DeBERTa's before the norm, "after" for the one after the layer; word_scale, the word rows'
factor; layer_norm_bias, whether there is a beta), lists every file with its shape and
dtype, and the sha256 of the checkpoint's weights file(s) as npbert read them (for a model
fetched from the Hub with its embedding tensors only, "model" says so: the file is npbert's
cut of the Hub's, and its sha256 is not the Hub's). Each float64 stage file also has
its "atol": the largest absolute difference allowed from it, for a float32 implementation
and for a float64 one. That is 1e-5 (float32) or 1e-12 (float64), or where the stage's values
are large, {STEPS} steps of the precision at its largest |value|, as 1e-5 is less than one
float32 step from 128 up; for a stage that is a matrix product (projected, embed_proj), more
where a product of its length and size can differ by more, computed correctly in that
precision from an input within its own stage's atol (npbert.verify.stages.product_atol).
`.npy` is NumPy's simple format: a header, then raw little-endian data in C order; readers
exist for most languages.

manifest.json's "cases" maps each folder to its "description", for a case made from text the
"texts" (and "pairs") it was tokenized from (tokenizer.json's own settings, truncated to the
model's positions, so the longest case ends where the model's limit does), and its "files":
each file's path, shape,
dtype, and for a float64 stage its atol. "stages" says what each stage holds; a family whose
layer looks up one table has no "sum".

To check an implementation: for each case, feed it the inputs, and compare each stage you can
expose with the float64 file within that file's atol for your precision. The first stage
that disagrees is where the bug is. `npbert compare` does this for one output file.
"""
