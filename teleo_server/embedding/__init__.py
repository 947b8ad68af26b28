"""Embedding: one model code path, served in-process or through Triton."""
