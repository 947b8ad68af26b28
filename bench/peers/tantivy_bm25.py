"""Tantivy (the ``tantivy`` Python bindings of the Rust engine): BM25 over whole memories.

Two fields, two modes, so the tokenisation's part in the comparison is visible:

* ``bm25``: Tantivy's own ``default`` analyzer (split on non-alphanumerics, drop tokens over 40
  bytes, lowercase) on the raw text; queries through its lenient query parser (terms OR-ed).
* ``bm25_teleo_tokens``: Teleo's analyser terms (``teleo_server.analysis.tokenize``) joined by
  spaces into a field with a whitespace analyzer; the query is the OR of Teleo's query terms. The
  terms are then exactly Teleo's.

Tantivy's BM25 has fixed k1 = 1.2 and b = 0.75 (Teleo: 0.9 and 0.4) and stores document lengths
in one byte (exact up to about 40 terms, rounded above), so its ranking is not bit-identical to
Teleo's even with the same terms; the report gives both nDCG@10 values beside the timings.
Segments are merged to one after indexing; searches use one thread (a single searcher).
"""

from __future__ import annotations

import importlib.metadata as md
import time
from pathlib import Path

from bench.peers.base import PeerCorpus, PeerQueries, PeerUnavailable

K1, B = 1.2, 0.75  # Tantivy's BM25 constants (not configurable)


class TantivyPeer:
    name = "tantivy"
    modes = ("bm25", "bm25_teleo_tokens")
    exact_modes = {"bm25_teleo_tokens": "bm25_k1.2_b0.75"}
    # Document lengths kept in one byte (exact to about 40 terms) reorder near-ties past that.
    min_agreement = {"bm25_teleo_tokens": 0.95}

    def __init__(self, heap_bytes: int = 200_000_000) -> None:
        try:
            import tantivy  # noqa: F401
        except ImportError as exc:
            raise PeerUnavailable(f"tantivy not installed ({exc}); `make bench-venv` installs the peers") from exc
        self.heap_bytes = heap_bytes
        self.index = None
        self.searcher = None
        self.schema = None
        self.corpus: PeerCorpus | None = None

    def version(self) -> str:
        return f"tantivy {md.version('tantivy')} (BM25 k1 {K1}, b {B})"

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import tantivy

        from teleo_server.analysis import tokenize

        self.corpus = corpus
        path = workdir / "tantivy"
        path.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("doc", stored=False, fast=True, indexed=False)
        sb.add_text_field("body", tokenizer_name="default", index_option="freq")
        sb.add_text_field("teleo", tokenizer_name="teleo_ws", index_option="freq")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema, path=str(path), reuse=False)
        self.index.register_tokenizer("teleo_ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
        writer = self.index.writer(self.heap_bytes, 1)
        for i, text in enumerate(corpus.texts):
            writer.add_document(tantivy.Document(doc=i, body=text, teleo=" ".join(tokenize(text))))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        return time.perf_counter() - t0

    def _query(self, mode: str, text: str):
        import tantivy

        from teleo_server.analysis import tokenize

        if mode == "bm25":
            q, _errors = self.index.parse_query_lenient(text, ["body"])
            return q
        if mode == "bm25_teleo_tokens":
            terms = list(dict.fromkeys(tokenize(text)))
            if not terms:
                return None
            return tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "teleo", t)) for t in terms])
        raise ValueError(f"tantivy has no mode {mode!r}")

    def scored(self, mode: str, text: str, k: int) -> list[tuple[int, float]]:
        """(memory index, BM25 score) of the top ``k``."""
        assert self.searcher is not None
        q = self._query(mode, text)
        if q is None:
            return []
        hits = self.searcher.search(q, k, count=False).hits
        if not hits:
            return []
        docs = self.searcher.fast_field_values("doc", [a for _, a in hits])
        return [(int(d), float(s)) for (s, _), d in zip(hits, docs)]

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        return [d for d, _ in self.scored(mode, queries.texts[j], k)]

    def close(self) -> None:
        self.searcher = None
        self.index = None
