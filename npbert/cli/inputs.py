"""What to embed, from the command line: texts (tokenized) or id files, checked."""

import sys
from dataclasses import dataclass

import numpy as np

from npbert.cli.errors import warn_ahead
from npbert.cli.options import ID_FILES, WITH_IDS, flag
from npbert.errors import InputError
from npbert.loading.checkpoint import float32_trouble, largest_output
from npbert.loading.npyfile import load_npy


@dataclass
class ToEmbed:
    """What to embed: weights and (B, L) ids, from texts or from .npy files."""

    weights: object
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None  # None: the family's default, or it has no table
    arrays: dict  # input arrays to save beside the embeddings
    meta: dict  # what went in, for the output's metadata
    tokens: list | None = None
    texts: list | None = None
    attention_mask: np.ndarray | None = None
    position_ids: np.ndarray | None = None  # None: the family's default

    def embed_args(self) -> tuple:
        """The positional and keyword arguments of embed() and embed_stages()."""
        args = (self.weights, self.input_ids, self.token_type_ids)
        return args, {"position_ids": self.position_ids, "attention_mask": self.attention_mask}

    def reference_inputs(self) -> dict:
        """The inputs the layer takes, the family's defaults filled in, as compare() checks a
        candidate's: {name: array, or None where the layer takes none}."""
        from npbert.layer.inputs import prepare_inputs

        args = (self.input_ids, self.token_type_ids, self.position_ids, self.attention_mask)
        used = prepare_inputs(self.weights.config, *args)
        mask = used.attention_mask
        if mask is None:
            mask = np.ones_like(used.input_ids)  # every token real
        return {
            "input_ids": used.input_ids,
            "token_type_ids": used.token_type_ids,
            "position_ids": used.position_ids,
            # only DeBERTa's layer takes the mask (it zeroes padding): others' is not checked
            "attention_mask": mask if self.weights.config.family.masks_padding else None,
        }


def read_inputs(args) -> ToEmbed:
    from npbert.embedder import Embedder

    if args.ids_file is not None:
        return read_ids(args, bool(args.texts))
    refuse_id_companions(args)
    if not args.texts:
        raise InputError("nothing to embed: give TEXT arguments or --ids-file")
    if args.pair and len(args.pair) != len(args.texts):
        raise InputError(f"{len(args.texts)} TEXT arguments but {len(args.pair)} --pair")
    embedder = Embedder.from_pretrained(args.model, revision=args.revision, full=args.full)
    encoding = some_tokens(embedder.encode(args.texts, args.pair, truncation=args.truncate))
    arrays = {
        "input_ids": encoding.input_ids,
        "token_type_ids": encoding.token_type_ids,
        "attention_mask": encoding.attention_mask,
    }
    meta = {"texts": args.texts, "pairs": args.pair}
    return ToEmbed(
        embedder.weights,
        encoding.input_ids,
        encoding.token_type_ids if embedder.weights.config.type_vocab_size else None,
        arrays,
        meta,
        encoding.tokens,
        args.texts,
        encoding.attention_mask,
    )


def refuse_id_companions(args) -> None:
    """InputError for a file that goes with --ids-file (--token-type-ids-file, ...) given
    without it."""
    for option in WITH_IDS.values():
        if getattr(args, option) is not None:
            raise InputError(f"{flag(option)} goes with --ids-file")


def some_tokens(encoding):
    """The Encoding, if any of its texts has a token: a tokenizer that adds no special tokens
    gives an empty text none, and there would be nothing to embed or explain."""
    if encoding.input_ids.shape[-1] == 0:
        raise InputError(
            "no text gives a token: the tokenizer adds no special tokens, and the text is "
            "empty or whitespace: nothing to embed"
        )
    return encoding


def read_ids(args, text_given: bool, *, one: bool = False) -> ToEmbed:
    """--ids-file, with --token-type-ids-file, --position-ids-file and --attention-mask-file
    where given; `one`: the ids must be one sequence's (refused before the model loads)."""
    from npbert.model import load_weights

    if text_given or args.pair:
        raise InputError("give TEXT arguments or --ids-file, not both")
    if args.truncate:
        raise InputError("--truncate cuts texts; it does nothing to --ids-file's ids")
    input_ids = load_npy(args.ids_file, "--ids-file")
    if one:
        refuse_batches(args, np.shape(input_ids))
    token_type_ids, position_ids, attention_mask = (
        None if getattr(args, option) is None else load_npy(getattr(args, option), flag(option))
        for option in WITH_IDS.values()
    )
    shape = np.shape(input_ids)
    arrays = {  # the inputs used: the files', or the defaults a tokenizer gives unpadded ids
        "input_ids": input_ids,
        "token_type_ids": np.zeros(shape, np.int64) if token_type_ids is None else token_type_ids,
        "attention_mask": np.ones(shape, np.int64) if attention_mask is None else attention_mask,
        **({} if position_ids is None else {"position_ids": position_ids}),
    }
    weights = load_weights(args.model, revision=args.revision, full=args.full)
    check_id_files(args, weights.config, input_ids, token_type_ids, position_ids, attention_mask)
    if attention_mask is None:
        warn_unmasked_padding(weights.config, np.asarray(input_ids))
    if position_ids is not None:
        warn_other_positions(weights.config, np.asarray(input_ids), np.asarray(position_ids))
    meta = {"ids_file": str(args.ids_file)}
    return ToEmbed(
        weights, input_ids, token_type_ids, arrays, meta,
        attention_mask=attention_mask, position_ids=position_ids,
    )  # fmt: skip


def warn_other_positions(config, input_ids: np.ndarray, position_ids: np.ndarray) -> None:
    """One line on stderr where --position-ids-file's positions for real tokens are not those
    the family's model makes for these ids: they are used as given, so a port that numbers
    positions wrongly (RoBERTa's from 0, not padding_idx + 1) and passes its own to compare
    would pass. (RoBERTa's padding takes position padding_idx; what a file gives it there is
    left alone.)"""
    from npbert.layer.inputs import own_position_ids

    own = own_position_ids(config, input_ids)  # (L,) or input_ids' shape
    if own is None:
        return
    given, own = np.broadcast_arrays(position_ids, own)
    real = own != config.padding_idx  # every token but RoBERTa's padding
    differ = np.argwhere((given != own) & real)
    if not len(differ):
        return
    at = tuple(int(i) for i in differ[0])
    print(
        f"npbert: warning: --position-ids-file holds positions other than those "
        f"{config.model_type} makes for these ids ({len(differ)} of {real.sum()} differ; the "
        f"first at {at}: {given[at]} vs {own[at]}): they are used as given",
        file=sys.stderr,
    )


def warn_unmasked_padding(config, input_ids: np.ndarray) -> None:
    """One line on stderr where a family that zeroes padding (DeBERTa) gets ids holding its
    pad id and no mask: every token counts as real, which a port that zeroes padding by the
    ids, or one that forgets to, would not show."""
    pad = config.pad_token_id
    if not config.family.masks_padding or pad is None:
        return
    padding = int((input_ids == pad).sum())
    if not padding:
        return
    print(
        f"npbert: warning: --ids-file holds the pad id {pad} ({padding} "
        f"of {input_ids.size} ids), and no --attention-mask-file is given: every token counts "
        f"as real, where {config.model_type} zeroes the padding the mask marks",
        file=sys.stderr,
    )


def check_id_files(args, config, input_ids, token_type_ids, position_ids, attention_mask) -> None:
    """The files' arrays checked as embed() checks them, an error naming the file as well as
    the array and index ("--ids-file ids.npy: input_ids[0, 2] = -1 is out of range ...")."""
    from npbert.layer.inputs import prepare_inputs

    try:
        prepare_inputs(config, input_ids, token_type_ids, position_ids, attention_mask)
    except InputError as error:
        name = next((n for n in ID_FILES if str(error).startswith(n)), None)
        path = None if name is None else getattr(args, ID_FILES[name])
        if path is None:  # a default the file did not give
            raise
        option = flag(ID_FILES[name])
        raise InputError(f"{option} {path}: {error}") from None


def check_float32(weights, dtype: str) -> None:
    """For a corpus: one warning line, ahead of the run, if float32 cannot compute every token
    with these weights, and none of NumPy's from the layer after it; and one if the outputs
    may exceed float16's range, where the shards are float16."""
    trouble = float32_trouble(weights)
    if trouble:
        warn_ahead(trouble)
    largest = largest_output(weights)
    if dtype == "float16" and largest > float(np.finfo(np.float16).max):
        print(
            f"npbert: warning: this checkpoint's outputs may reach {largest:.3g}, past float16's "
            "largest number (65504): those values are written as Inf; use --dtype float32",
            file=sys.stderr,
        )


def refuse_batches(args, shape: tuple) -> None:
    """InputError for --ids-file ids that are not one sequence's, (L,) or (1, L)."""
    if len(shape) != 1 and (len(shape) != 2 or shape[0] != 1):
        raise InputError(
            f"--ids-file {args.ids_file}: explain walks through one sequence, (L,) or (1, L) "
            f"ids, not {shape}"
        )
