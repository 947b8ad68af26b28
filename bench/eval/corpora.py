"""Datasets turned into (Memory, EmbeddingSet) pairs and embedded queries, through the cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from teleo_server.domain import EmbeddingSet, Memory, MemoryType, content_hash

from bench.eval.cache import embed_cached
from bench.eval.datasets import Dataset, QueryItem, locomo, scifact


def engine_factory(threads: int):
    def make():
        from teleo_server.embedding.engine import Engine
        from teleo_server.embedding.repository import default_model_dir

        return Engine(default_model_dir(), threads=threads)

    return make


@dataclass(slots=True)
class Prepared:
    name: str
    items: list[tuple[Memory, EmbeddingSet]]
    queries: dict[str, list[tuple[QueryItem, EmbeddingSet]]]


def prepare(ds: Dataset, cache: Path, threads: int, namespace: str = "eval") -> Prepared:
    factory = engine_factory(threads)
    doc_sets = embed_cached([d.text for d in ds.docs], False, cache, factory, f"{ds.name}-docs")
    items = []
    for d, emb in zip(ds.docs, doc_sets):
        t = d.event_time or 1.7e9
        m = Memory(id=d.id, namespace=namespace, content=d.text, content_hash=content_hash(d.text),
                   memory_type=MemoryType.EPISODIC if d.session else MemoryType.SEMANTIC,
                   event_time=t, ingestion_time=t, session_id=d.session, session_position=d.position,
                   model_version=emb.model_version, chunk_count=len(emb.chunks))
        items.append((m, emb))
    queries = {}
    for split, qs in ds.queries.items():
        q_sets = embed_cached([q.text for q in qs], True, cache, factory, f"{ds.name}-{split}-queries")
        queries[split] = list(zip(qs, q_sets))
    return Prepared(ds.name, items, queries)


def load_all(data: Path, cache: Path, threads: int, which: tuple[str, ...] = ("scifact", "locomo")) -> dict[str, list[Prepared]]:
    out: dict[str, list[Prepared]] = {}
    if "locomo" in which:
        out["locomo"] = [prepare(ds, cache, threads) for ds in locomo(data)]
    if "scifact" in which:
        out["scifact"] = [prepare(scifact(data), cache, threads)]
    if "code" in which:  # generated from this Python's standard library: needs no data directory
        from bench.eval.code.generate import build

        out["code"] = [prepare(build(), cache, threads)]
    return out


__all__ = ["Prepared", "engine_factory", "load_all", "prepare"]
