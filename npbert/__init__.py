"""npbert: BERT's embedding layer in pure NumPy.

from npbert import load_weights, embed, Embedder
"""

from npbert.checkpoint import EmbeddingWeights
from npbert.errors import InputError
from npbert.model import Embedder, EmbedderOutput, embed, embed_stages, load_weights

__all__ = [
    "Embedder",
    "EmbedderOutput",
    "EmbeddingWeights",
    "InputError",
    "embed",
    "embed_stages",
    "load_weights",
]
__version__ = "0.1.0"
