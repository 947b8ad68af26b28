"""Embedding throughput and latency: Triton vs in-process (``python -m bench.embedding``)."""
