"""The corpus job's options, declared once: CorpusSettings, checked as it is made.

Both engines take it (npbert.stream.corpus.embed_corpus on worker processes,
npbert.ray.embed_corpus_on_ray on Ray actors), the command line builds it from its options,
and the index records the fields that say what the shards hold (INDEX).
"""

import dataclasses
from dataclasses import dataclass, field

from npbert.errors import InputError
from npbert.layer.inputs import check_count, check_flag, shown
from npbert.stream.progress import check_mode

INPUT_FORMATS = ("txt", "jsonl", "parquet")
DTYPES = ("float32", "float16")
ENGINES = ("local", "ray")

# A field's place in the index: "compared" (a resumed run must not differ in it) or "kept"
# (recorded only: a format given that an extension says anyway reads the same bytes, as the
# input's hash tells); fields without one are how a run goes, not what it writes.
INDEX = "index"


@dataclass(frozen=True)
class CorpusSettings:
    """How a corpus is embedded; InputError for a value the job would not take.

    input_format: "txt", "jsonl" or "parquet" for every file, None: from each file's extension.
    shard_bytes: bytes of input per shard. truncation: cut texts longer than the model allows
    (else refuse them). dtype: the shards' embeddings, "float32" or "float16". resume: continue
    the run the output directory holds. engine: "local" (worker processes: embed_corpus) or
    "ray" (Ray actors: npbert.ray.embed_corpus_on_ray). workers: processes or actors, None: one
    per core (per CPU of the cluster). address: the Ray cluster to join (engine "ray"
    only), None: RAY_ADDRESS's, else one started here. progress: "bar", "lines" or None.
    """

    input_format: str | None = field(default=None, metadata={INDEX: "kept"})
    shard_bytes: int = field(default=1 << 16, metadata={INDEX: "compared"})
    truncation: bool = field(default=False, metadata={INDEX: "compared"})
    dtype: str = field(default="float32", metadata={INDEX: "compared"})
    resume: bool = False
    workers: int | None = None
    engine: str = "local"
    address: str | None = None
    progress: str | None = None

    def __post_init__(self):
        checked = {
            "shard_bytes": check_count("shard_bytes", self.shard_bytes),
            "truncation": check_flag("truncation", self.truncation),  # JSON has no NumPy bool
            "resume": check_flag("resume", self.resume),
            "workers": None if self.workers is None else check_count("workers", self.workers),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        for name, allowed in (
            ("input_format", (None, *INPUT_FORMATS)),
            ("dtype", DTYPES),
            ("engine", ENGINES),
        ):
            check_name(name, getattr(self, name), allowed)
        check_mode(self.progress)
        self.check_address()

    def check_address(self) -> None:
        """InputError unless no address, or a Ray engine's (a non-empty str)."""
        if self.address is None:
            return
        if self.engine != "ray":
            raise InputError(
                f"{{address}} {self.address} is for a Ray cluster: add {{engine='ray'}}"
            )
        if not isinstance(self.address, str):
            raise InputError(f"address must be a str, host:port, got {shown(self.address)}")
        if not self.address.strip():
            raise InputError("the Ray address is empty: give host:port, or none to start a cluster")

    def indexed(self) -> dict:
        """The fields the index records, by name, in their order."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if INDEX in f.metadata
        }


COMPARED = tuple(
    f.name for f in dataclasses.fields(CorpusSettings) if f.metadata.get(INDEX) == "compared"
)


def check_name(name: str, value, allowed: tuple) -> None:
    """InputError unless `value` is one of `allowed` (names, or None), as such: NumPy's
    np.dtype("float16") equals "float16", and the index could not be written as JSON."""
    if not (value is None or isinstance(value, str)) or value not in allowed:
        *others, last = [repr(a) for a in allowed if a is not None]
        names = f"{', '.join(others)} or {last}"
        raise InputError(f"{name} must be the name {names}, got {shown(value)}")


def settings_of(settings: CorpusSettings | None, options: dict) -> CorpusSettings:
    """`settings` (default: CorpusSettings()) with `options` (its fields, by name) over it."""
    if settings is not None and not isinstance(settings, CorpusSettings):
        raise InputError(f"settings must be a CorpusSettings, got {shown(settings)}")
    return dataclasses.replace(settings or CorpusSettings(), **options)
