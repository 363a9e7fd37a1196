"""The embedding layer of BERT and its family of encoders: the math, and nothing else.

BERT's layer: the paper's sum of three embeddings, normalized as in Google's reference code
(modeling.py's embedding_postprocessor) and Hugging Face's BertEmbeddings:

    embeddings = LayerNorm(word_embeddings[input_ids]
                           + token_type_embeddings[token_type_ids]
                           + position_embeddings[position_ids])

Every other encoder of the family varies this one line: which of the three tables it has, the
order in which it adds them (float32 addition is not associative, so the order is kept), how
it numbers positions, its norm, and a few extras: a projection E -> H after the layer
(ALBERT, RemBERT; ELECTRA, RoFormer and ConvBERT where E != H), before its LayerNorm
(DeBERTa) or after it (FNet), BigBird's scale of the word rows, DeBERTa's and ESM's mask, ESM's
token dropout, MobileBERT's trigram and NoNorm, no norm at all (Megatron-BERT). Below: the
primitives (lookup, LayerNorm as normalize and scale_shift, linear), the ways positions are
numbered, then one short function per formula, each computing what transformers' own
`model.embeddings(...)` computes. Every family applies dropout somewhere in its layer (BigBird
before the LayerNorm, DeBERTa after the mask, the others last); at inference it is the
identity, so it is left out.

The tables are learned parameters, trained with the rest of the model. BERT's position
embeddings are not the fixed sinusoids of the original Transformer, and its segment
embeddings are learned vectors, one per token type, not vectors of zeros and ones. The one
exception: DistilBERT with sinusoidal_pos_embds fills its position table with those fixed
sinusoids, and stores it as a table like the others.

Shapes: B batch, L sequence length, V vocabulary, P positions, T token types, E the width of
the tables, H the hidden size (E = H but where a projection maps E -> H). A leading (B,) is
optional throughout. `w` is an npbert.layer.weights.EmbeddingWeights: the arrays, and w.config.

This module imports nothing but NumPy and checks nothing: npbert.layer.inputs validates the
ids first, because NumPy would silently wrap a negative id to a row from the end.
"""

import numpy as np

# --- primitives ---------------------------------------------------------------------------


def lookup(table: np.ndarray, ids: np.ndarray, dtype: type) -> np.ndarray:
    """An embedding is a row lookup: table (N, E) of N rows (V, P or T), ids (...) int in
    [0, N) -> (..., E) in dtype."""
    return table[ids].astype(dtype)


def normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """Zero mean, unit variance over the last axis: x (..., E) -> (..., E)."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centered = x - mean  # (..., E)
    # Biased variance (divide by E, not E-1), as torch.nn.LayerNorm; two passes over x,
    # because E[x^2] - E[x]^2 cancels catastrophically when the mean is large.
    variance = (centered * centered).mean(axis=-1, keepdims=True)  # (..., 1)
    return centered / np.sqrt(variance + eps)  # (..., E)


def scale_shift(normalized: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """LayerNorm's learned per-dimension scale and shift: normalized (..., E) float, weight
    (gamma, LayerNorm.weight) and bias (beta, LayerNorm.bias; None in ModernBERT without
    norm_bias) (E,) -> (..., E) in normalized's dtype."""
    scaled = normalized * weight.astype(normalized.dtype)  # (..., E)
    return scaled if bias is None else scaled + bias.astype(normalized.dtype)  # (..., E)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """torch.nn.Linear: x (..., E) @ weight.T, weight (H, E) as torch stores it, + bias (H,)
    or None -> (..., H) in x's dtype."""
    y = x @ weight.T.astype(x.dtype)  # (..., H)
    return y if bias is None else y + bias.astype(x.dtype)  # (..., H)


# --- positions ----------------------------------------------------------------------------


def absolute_position_ids(length: int, offset: int = 0) -> np.ndarray:
    """BERT's positions: 0..L-1, shared by every sequence of the batch; offset..offset+L-1 in
    Nystromformer, YOSO and MRA (offset 2), whose tables have two rows before them. -> (L,)"""
    return np.arange(length) + offset


def padded_position_ids(input_ids: np.ndarray, padding_idx: int) -> np.ndarray:
    """RoBERTa's positions (fairseq's make_positions): real tokens count up from padding_idx + 1,
    padding tokens get padding_idx, wherever they are. input_ids (..., L) -> (..., L).

    The position table's padding_idx row is zeros, kept so in training (nn.Embedding's
    padding_idx): padding gets no position, and real tokens count from the row after it, so
    rows 0..padding_idx are never a real token's; with padding_idx 1, a table of 514 rows holds
    512 positions."""
    real = input_ids != padding_idx  # (..., L)
    return np.cumsum(real, axis=-1) * real + padding_idx  # (..., L)


SINUSOID_BASE = 10000.0  # "Attention is all you need", section 3.5


def sinusoidal_table(num_positions: int, hidden_size: int) -> np.ndarray:
    """The Transformer's fixed position table: (P, H) float64.

    table[pos, j] = sin(pos / 10000^(2i/H)) for even j = 2i, cos(pos / 10000^(2i/H)) for odd
    j = 2i + 1: exactly DistilBERT's `_create_sinusoidal_embeddings`
    (transformers/models/distilbert/modeling_distilbert.py, used when sinusoidal_pos_embds=True),
    which computes `pos / np.power(10000, 2 * (j // 2) / dim)` and stores it as float32.
    """
    j = np.arange(hidden_size)
    angles = np.arange(num_positions)[:, None] / np.power(SINUSOID_BASE, 2 * (j // 2) / hidden_size)
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))


# --- the formulas, one per family ---------------------------------------------------------
# Each takes the weights and validated ids, None where the family has no such table:
# input_ids (B, L) int, token_type_ids (B, L) int, position_ids (L,) or (B, L) int,
# attention_mask (B, L) of 0 and 1 (read by DeBERTa and ESM alone), dtype np.float32 or np.float64;
# and returns every stage of the layer by name, in the order computed, in dtype;
# "embeddings" is the output.


def bert(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm((W + T) + P): BERT, ERNIE; ALBERT and ELECTRA at width E, which then project
    it E -> H after the layer (ALBERT always, ELECTRA where E != H: npbert.model.embed_stages,
    project=True); RoBERTa, XLM-RoBERTa and CamemBERT with padded_position_ids."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, E)
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, E) or (B, L, E)
    summed = word + token_type + position  # (B, L, E)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, E)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, E)
    return dict(word=word, token_type=token_type, position=position, sum=summed,
                normalized=normalized, embeddings=embeddings)  # fmt: skip


def longformer(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm((W + P) + T): Longformer (padded_position_ids), SqueezeBERT."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, E) or (B, L, E)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, E)
    summed = word + position + token_type  # (B, L, E)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, E)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, E)
    return dict(word=word, position=position, token_type=token_type, sum=summed,
                normalized=normalized, embeddings=embeddings)  # fmt: skip


def megatron(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """(W + T) + P, not normalized: Megatron-BERT, XLM-RoBERTa-XL (padded_position_ids). Their
    encoder layers normalize their input first (pre-LN), so the layer's output is the sum."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, H)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, H)
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, H) or (B, L, H)
    summed = word + token_type + position  # (B, L, H)
    return dict(word=word, token_type=token_type, position=position, sum=summed,
                embeddings=summed)  # fmt: skip


def fnet(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """Linear(LayerNorm((W + T) + P)): FNet, whose module ends with a Linear(H -> H) (its
    `projection`, with a bias) after BERT's layer. layer_norm holds the LayerNorm's output."""
    stages = bert(w, input_ids, token_type_ids, position_ids, attention_mask, dtype)
    stages["layer_norm"] = stages.pop("embeddings")  # (B, L, H)
    stages["embeddings"] = linear(stages["layer_norm"], w.projection_weight, w.projection_bias)
    return stages  # embeddings (B, L, H)


def big_bird(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm((W * sqrt(H) + T) + P): BigBird, its word rows scaled by sqrt(H) when
    rescale_embeddings is set (w.config.word_scale; 1 otherwise, which changes nothing). The
    word stage is the row as stored; the sum holds it scaled."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, H)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, H)
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, H) or (B, L, H)
    summed = word * dtype(w.config.word_scale) + token_type + position  # (B, L, H)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, H)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, H)
    return dict(word=word, token_type=token_type, position=position, sum=summed,
                normalized=normalized, embeddings=embeddings)  # fmt: skip


def distilbert(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(W + P), no token types: DistilBERT, MPNet (padded_position_ids)."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, H)
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, H) or (B, L, H)
    summed = word + position  # (B, L, H)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, H)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, H)
    return dict(word=word, position=position, sum=summed, normalized=normalized,
                embeddings=embeddings)  # fmt: skip


def roformer(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(W + T), no position table (rotary positions, applied in attention): RoFormer
    at width E (then projected E -> H where E != H, as ELECTRA is, see bert), NomicBERT."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, E)
    summed = word + token_type  # (B, L, E)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, E)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, E)
    return dict(word=word, token_type=token_type, sum=summed, normalized=normalized,
                embeddings=embeddings)  # fmt: skip


def modernbert(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(W), neither positions nor token types: ModernBERT (rotary positions in its
    attention; its LayerNorm without a bias unless norm_bias), Funnel (relative positions and
    token types, both used in its attention)."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, H)
    normalized = normalize(word, w.config.layer_norm_eps)  # (B, L, H)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, H)
    return dict(word=word, normalized=normalized, embeddings=embeddings)


def gte(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(W + T) as roformer, or LayerNorm(W) as modernbert where type_vocab_size is 0
    and the model has no token-type table: GTE (rotary positions in its attention)."""
    layer = modernbert if w.token_type_embeddings is None else roformer
    return layer(w, input_ids, token_type_ids, position_ids, attention_mask, dtype)


# The share of tokens ESM's training masked (15%, of which 80% became <mask>): its token dropout
# scales the word rows by (1 - this) / (1 - the share of <mask> tokens in the sequence).
ESM_MASK_RATIO_TRAIN = 0.15 * 0.8


def token_dropout(word, input_ids, attention_mask, mask_token_id: int) -> np.ndarray:
    """ESM's token dropout at inference: <mask> rows zeroed, the rest scaled so that a
    sequence's rows add up as in training. word (B, L, E), input_ids (B, L), attention_mask
    (B, L) or None (every token counts) -> (B, L, E). The share is float32, as ESM's module
    computes it (`.float()`) whatever its dtype."""
    masked = input_ids == mask_token_id  # (B, L)
    kept = np.where(masked[..., None], word.dtype.type(0), word)  # (B, L, E)
    counted = input_ids.shape[-1] if attention_mask is None else attention_mask.sum(-1)  # (B,)
    share = np.float32(masked.sum(-1)) / np.float32(counted)  # (B,) float32
    kept = kept * word.dtype.type(1 - ESM_MASK_RATIO_TRAIN)  # (B, L, E)
    return kept / (np.float32(1) - share)[..., None, None].astype(word.dtype)  # (B, L, E)


def esm(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(dropped(W) + P) * attention_mask: ESM. dropped() is token_dropout where
    config.mask_token_id is set (token_dropout), P only with absolute positions (padded, as
    RoBERTa's; ESM-2's are rotary), the LayerNorm only with emb_layer_norm_before; given
    attention_mask, padding rows come out as zeros. The sum holds the rows the norm gets."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    stages = {"word": word}
    summed = word
    if w.config.mask_token_id is not None:  # token_dropout
        summed = token_dropout(word, input_ids, attention_mask, w.config.mask_token_id)
    if w.position_embeddings is not None:  # position_embedding_type "absolute"
        stages["position"] = lookup(w.position_embeddings, position_ids, dtype)  # (B, L, E)
        summed = summed + stages["position"]  # (B, L, E)
    if summed is not word:
        stages["sum"] = summed  # (B, L, E)
    if w.layer_norm_weight is not None:  # emb_layer_norm_before
        stages["normalized"] = normalize(summed, w.config.layer_norm_eps)  # (B, L, E)
        summed = scale_shift(stages["normalized"], w.layer_norm_weight, w.layer_norm_bias)
    if attention_mask is not None:
        summed = summed * attention_mask[..., None].astype(dtype)  # padding zeroed
    return stages | {"embeddings": summed}  # (B, L, E)


def trigram(word: np.ndarray) -> np.ndarray:
    """MobileBERT's trigram input: each token's row after the next token's and before the
    previous token's, zeros past the ends: word (B, L, E) -> (B, L, 3E), [next, this, prev]."""
    zero = np.zeros_like(word[..., :1, :])  # (B, 1, E)
    following = np.concatenate([word[..., 1:, :], zero], axis=-2)  # (B, L, E)
    preceding = np.concatenate([zero, word[..., :-1, :]], axis=-2)  # (B, L, E)
    return np.concatenate([following, word, preceding], axis=-1)  # (B, L, 3E)


def mobilebert(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """Norm(Linear(trigram(W)) + P + T): MobileBERT. The trigram where trigram_input, the
    Linear (embedding_transformation, 3E or E -> H) where there is a trigram or E != H, the
    position and token-type rows at width H. In a padded batch the last real token's next row
    is the padding's, as in transformers: the trigram reads the ids as given."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    stages = {"word": word}
    x = word
    if w.config.trigram:
        x = stages["trigram"] = trigram(word)  # (B, L, 3E)
    if w.projection_weight is not None:
        x = linear(x, w.projection_weight, w.projection_bias)  # (B, L, H)
        stages["embedding_transformation"] = x
    return stages | mobilebert_rest(w, x, token_type_ids, position_ids, dtype)


def mobilebert_rest(w, x, token_type_ids, position_ids, dtype) -> dict:
    """MobileBERT after its Linear: x (B, L, H) + P + T, then NoNorm (normalization_type
    no_norm: gamma and beta, no statistics) or a LayerNorm (eps 1e-5, torch's default)."""
    position = lookup(w.position_embeddings, position_ids, dtype)  # (L, H) or (B, L, H)
    token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, H)
    summed = x + position + token_type  # (B, L, H)
    stages = {"position": position, "token_type": token_type, "sum": summed}
    if w.config.norm == "layer_norm":
        summed = stages["normalized"] = normalize(summed, w.config.layer_norm_eps)
    return stages | {"embeddings": scale_shift(summed, w.layer_norm_weight, w.layer_norm_bias)}


def deberta(w, input_ids, token_type_ids, position_ids, attention_mask, dtype) -> dict:
    """LayerNorm(embed_proj(W (+ P) (+ T))) * attention_mask: DeBERTa, DeBERTa-v2 and v3. P only
    if position_biased_input, T only if type_vocab_size > 0, embed_proj (no bias) only if
    E != H; given attention_mask, padding rows come out as zeros."""
    word = lookup(w.word_embeddings, input_ids, dtype)  # (B, L, E)
    stages = {"word": word}
    summed = word  # (B, L, E)
    if w.position_embeddings is not None:  # position_biased_input
        position = lookup(w.position_embeddings, position_ids, dtype)  # (L, E) or (B, L, E)
        stages["position"] = position
        summed = summed + position  # (B, L, E)
    if w.token_type_embeddings is not None:  # type_vocab_size > 0
        token_type = lookup(w.token_type_embeddings, token_type_ids, dtype)  # (B, L, E)
        stages["token_type"] = token_type
        summed = summed + token_type  # (B, L, E)
    if len(stages) > 1:  # a table was added to the word rows
        stages["sum"] = summed  # (B, L, E)
    if w.projection_weight is not None:  # E != H
        summed = linear(summed, w.projection_weight, None)  # (B, L, H)
        stages["embed_proj"] = summed  # (B, L, H)
    normalized = normalize(summed, w.config.layer_norm_eps)  # (B, L, H)
    embeddings = scale_shift(normalized, w.layer_norm_weight, w.layer_norm_bias)  # (B, L, H)
    if attention_mask is not None:
        embeddings = embeddings * attention_mask[..., None].astype(dtype)  # padding zeroed
    return stages | {"normalized": normalized, "embeddings": embeddings}  # these two (B, L, H)
