"""A Ray Dataset's texts embedded by Ray Data actors: embed_dataset, and Embed, the callable
class under it for `Dataset.map_batches`."""

import math
import os
import sys

import numpy as np

from npbert.embedder import Embedder
from npbert.errors import InputError
from npbert.layer.inputs import check_count, shown
from npbert.ray.cluster import ray_package
from npbert.stream.local import WORKERS_PER_CORE
from npbert.stream.records import Record
from npbert.stream.settings import CorpusSettings
from npbert.stream.shards import shard_arrays

COLUMNS = ("embeddings", "input_ids", "token_type_ids", "lengths")


def _ragged(arrays: list) -> np.ndarray:
    """An object array of arrays, one per row: how Ray Data's numpy batches hold a column of
    arrays of different shapes (np.array would stack equal shapes or fail)."""
    column = np.empty(len(arrays), dtype=object)
    column[:] = arrays
    return column


class Embed:
    """For `Dataset.map_batches(Embed, fn_constructor_kwargs={"model": M}, ...)`.

    Takes numpy batches with a `text` column of strings and an optional `pair` column (strings,
    or None or NaN for a text without one; a `where` column, if any, names texts in errors).
    Adds, per text: embeddings (L_i, width) in `dtype`, input_ids and token_type_ids (L_i,) int64,
    lengths int64; padding is never computed nor returned. Other columns pass through. One model
    and one thread per actor.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        revision: str | None = None,
        full: bool = False,
        truncation: bool = False,
        dtype: str = "float32",
    ):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the actor's one CPU
        checked = CorpusSettings(truncation=truncation, dtype=dtype)
        self.embedder = Embedder.from_pretrained(model, revision=revision, full=full)
        self.truncation, self.dtype = checked.truncation, checked.dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if "text" not in batch:
            raise InputError(f"the dataset has no 'text' column (its columns: {', '.join(batch)})")
        taken = [column for column in COLUMNS if column in batch]
        if taken:
            raise InputError(f"the dataset has a column {taken[0]!r}, which Embed would replace")
        arrays = shard_arrays(self.embedder, _records(batch), self.truncation, self.dtype)
        lengths = arrays["lengths"]
        ends = np.cumsum(lengths)[:-1]
        split = {  # np.split of no texts would still give one piece
            key: _ragged(np.split(arrays[key], ends) if len(lengths) else [])
            for key in ("embeddings", "input_ids", "token_type_ids")
        }
        return {**batch, **split, "lengths": lengths}


def pinned_revision(model: str | os.PathLike, revision: str | None) -> str | None:
    """The commit a Hub repo's revision (default: main) names, as this process resolves it
    (from its cache, else the Hub), for every actor to load: an actor resolving a branch
    itself could find another commit, an older one in its node's cache or one pushed since.
    A directory, and a name this process finds neither on disk nor on the Hub nor in its
    cache (a directory on the actors' nodes only, or a driver offline), are left to the
    actors, with the revision as given."""
    from npbert.loading.hub import NotFound, resolve

    if not isinstance(model, str):  # a path object: a directory
        return revision
    try:
        return resolve(model, revision=revision)[1].get("commit", revision)
    except NotFound:
        return revision


def _records(batch: dict[str, np.ndarray]) -> list[Record]:
    texts = batch["text"]
    if isinstance(texts, str | bytes):  # iterated, its characters would be the texts
        raise InputError("the batch's 'text' is one string: give a column of texts")
    pairs = batch.get("pair", [None] * len(texts))
    wheres = batch.get("where", [f"text {i} of its batch" for i in range(len(texts))])
    lengths = {"pair": len(pairs), "where": len(wheres)}
    for column, length in lengths.items():
        if isinstance(batch.get(column), str | bytes) or length != len(texts):
            raise InputError(f"the batch's {column!r} column is not one entry per text")
    records = []
    for where, text, pair in zip(wheres, texts, pairs, strict=True):
        if not isinstance(text, str):
            raise InputError(f"{where}: 'text' is {type(text).__name__}, not a string")
        if _missing(pair):
            pair = None
        elif not isinstance(pair, str):  # str() would make b"x" "b'x'"
            raise InputError(f"{where}: 'pair' is {type(pair).__name__}, not a string or None")
        records.append(Record(str(where), text, pair))
    return records


def _missing(value) -> bool:
    """Whether a `pair` value stands for none: None, or NaN, as a block whose pairs are all None
    (Arrow's null type) reaches numpy batches, and as pandas marks a missing value (pd.NA in
    its string dtype)."""
    if value is None or value is getattr(sys.modules.get("pandas"), "NA", None):
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def embed_dataset(
    dataset,
    model: str | os.PathLike,
    *,
    batch_size: int = 256,
    actors: int | None = None,
    cpus_per_actor: float = 1.0,
    dtype: str = "float32",
    truncation: bool = False,
    revision: str | None = None,
):
    """The Dataset with each text's embeddings (see Embed: (L_i, width) in `dtype`), computed
    by `actors` actors (default: default_actors) of `cpus_per_actor` CPUs each, on batches of
    `batch_size` texts. Order follows the input where the DataContext preserves it. A Hub
    repo's revision is resolved here, once (see pinned_revision)."""
    ray = ray_package()
    checked = CorpusSettings(truncation=truncation, dtype=dtype)
    revision = pinned_revision(model, revision)
    batch_size = check_count("batch_size", batch_size)
    check_cpus_per_actor(cpus_per_actor)
    if actors is None:
        actors = default_actors(ray.cluster_resources().get("CPU", 1), cpus_per_actor)
    actors = check_count("actors", actors)
    return dataset.map_batches(
        Embed,
        fn_constructor_kwargs={
            "model": os.fspath(model),
            "revision": revision,
            "truncation": checked.truncation,
            "dtype": checked.dtype,
        },
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=actors,
        num_cpus=cpus_per_actor,
    )


def check_cpus_per_actor(cpus_per_actor) -> None:
    """InputError unless a number above 0 (and finite)."""
    if isinstance(cpus_per_actor, bool) or not (
        isinstance(cpus_per_actor, int | float) and 0 < cpus_per_actor < math.inf
    ):
        raise InputError(f"cpus_per_actor must be a number above 0, got {shown(cpus_per_actor)}")


def default_actors(cpus: float, cpus_per_actor: float) -> int:
    """As many actors as the cluster's CPUs hold, but one CPU, and at most 4 a CPU: Ray Data's
    own tasks (reading Parquet, say) each need one, and actors that hold every CPU leave them
    none: the Dataset then waits forever (ray.data.read_parquet on two CPUs, two actors of one
    CPU each). At least one, even where it holds every CPU (one CPU, or cpus_per_actor above
    the CPUs but one): then give actors and cpus_per_actor to leave one free."""
    most = max(1, int(WORKERS_PER_CORE * cpus))  # as the corpus job's actors: check_actors
    return min(max(1, int(max(cpus - 1, 0) // cpus_per_actor)), most)
