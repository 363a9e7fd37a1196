"""Corpora streamed through the layer to shards on disk, in bounded memory, resumable.

The job (corpus: embed_corpus, read_corpus) and its options (settings: CorpusSettings); its
input (files, chunks, parquet, records); its output (shards, index); its local engine of
worker processes (local, stops); its progress (progress). npbert.ray adds a Ray engine.
"""

from npbert.stream.corpus import embed_corpus, read_corpus
from npbert.stream.settings import CorpusSettings

__all__ = ["CorpusSettings", "embed_corpus", "read_corpus"]
