"""Benchmark harness: quality, latency, scale and ingest workloads, Teleo beside named peers.

``python -m bench.harness --group smoke|cpu|gpu --out DIR`` runs a config group from
``bench/configs/`` and writes ``results.jsonl`` (one record per measurement, the environment
first), ``summary.md`` and PNG plots into DIR.
"""

__all__ = ["cli", "config", "env", "results", "synthetic"]
