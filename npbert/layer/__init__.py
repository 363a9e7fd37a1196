"""The embedding layer: its math, its families, and the fast path held to it."""
