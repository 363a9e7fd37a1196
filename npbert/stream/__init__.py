"""Corpora streamed through the layer to shards on disk, in bounded memory, resumable: read
from text, JSON lines or Parquet (sources), embedded by worker processes (corpus), with
progress shown (progress)."""

from npbert.stream.corpus import embed_corpus, read_corpus

__all__ = ["embed_corpus", "read_corpus"]
