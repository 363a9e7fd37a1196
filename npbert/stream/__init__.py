"""Corpora streamed through the layer to shards on disk."""
