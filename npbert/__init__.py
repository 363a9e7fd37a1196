"""npbert: the embedding layer of BERT and its family of encoders, in pure NumPy.

    import npbert
    weights = npbert.load_weights("path/to/checkpoint")  # or a Hub repo id
    embeddings = npbert.embed(weights, input_ids)  # (B, L, H) float32

The layer's math is npbert.layer.embedding; checkpoints are read by npbert.loading, corpora
streamed by npbert.stream (and npbert.ray), other implementations checked by npbert.verify.
"""

from npbert.embedder import Embedder, EmbedderOutput
from npbert.errors import DamagedCorpus, InputError, WorkerLost
from npbert.layer.config import EmbeddingConfig
from npbert.layer.weights import EmbeddingWeights
from npbert.model import embed, embed_stages, load_weights

__all__ = [
    "DamagedCorpus",
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
