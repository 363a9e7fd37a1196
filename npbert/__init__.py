"""npbert: the embedding layer of BERT and its family of encoders, in pure NumPy.

from npbert import load_weights, embed, Embedder
"""

import importlib
from typing import TYPE_CHECKING

# What `from npbert import ...` gives, by the module that holds it. Imported when first asked
# for (PEP 562), not by `import npbert`: the command (npbert.__main__) starts with nothing of
# NumPy loaded, so that a Ctrl-C while the rest loads is the command's to handle.
_EXPORTS = {
    "EmbeddingWeights": "npbert.checkpoint",
    "EmbeddingConfig": "npbert.config",
    "InputError": "npbert.errors",
    "WorkerLost": "npbert.errors",
    "Embedder": "npbert.model",
    "EmbedderOutput": "npbert.model",
    "embed": "npbert.model",
    "embed_stages": "npbert.model",
    "load_weights": "npbert.model",
}
__all__ = sorted(_EXPORTS)
# The submodules that importing the exports loads with them: attributes of npbert once they
# were loaded, as when `import npbert` imported the exports at once.
_LOADED = ("checkpoint", "config", "cores", "embedding", "errors", "families", "fast", "inputs",
           "model", "product", "ragged")  # fmt: skip
__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers and editors, which do not run __getattr__; "X as X"
    # says a name is re-exported (PEP 484)
    from npbert.checkpoint import EmbeddingWeights as EmbeddingWeights
    from npbert.config import EmbeddingConfig as EmbeddingConfig
    from npbert.errors import InputError as InputError
    from npbert.errors import WorkerLost as WorkerLost
    from npbert.model import Embedder as Embedder
    from npbert.model import EmbedderOutput as EmbedderOutput
    from npbert.model import embed as embed
    from npbert.model import embed_stages as embed_stages
    from npbert.model import load_weights as load_weights


def __getattr__(name: str):
    """An export, imported on first use; or one of the submodules `import npbert` used to load
    with them (npbert.fast, say). Others are imported by name (`import npbert.ray`)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # found directly from now on
        return value
    if name in _LOADED:
        return importlib.import_module(f"npbert.{name}")
    raise AttributeError(f"module 'npbert' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
