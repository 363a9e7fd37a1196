"""npbert: the embedding layer of BERT and its family of encoders, in pure NumPy.

from npbert import load_weights, embed, Embedder
"""

from npbert.checkpoint import EmbeddingWeights
from npbert.config import EmbeddingConfig
from npbert.errors import InputError, WorkerLost
from npbert.model import Embedder, EmbedderOutput, embed, embed_stages, load_weights

__all__ = [
    "Embedder",
    "EmbedderOutput",
    "EmbeddingConfig",
    "EmbeddingWeights",
    "InputError",
    "WorkerLost",
    "embed",
    "embed_stages",
    "load_weights",
]
__version__ = "0.1.0"
