"""OpenClaw's memory stack: SQLite FTS5 (``bm25()``) + ``sqlite-vec``, merged 0.7 vector / 0.3 text.

What OpenClaw's memory search runs (``src/memory/manager-search.ts``, ``hybrid.ts``), on the same
chunk rows and vectors as Teleo:

* **Vector arm**: ``SELECT id, vec_distance_cosine(embedding, ?) AS dist FROM chunks_vec ORDER BY
  dist LIMIT ?``, a scan of every row (exact), score ``1 - dist``.
* **Keyword arm**: the query's ``[\\p{L}\\p{N}_]+`` tokens, each quoted, joined by ``AND``
  (``buildFtsQuery``), against an FTS5 table (unicode61 tokenizer), ``ORDER BY rank`` (FTS5's
  ``bm25()``); score ``1 / (1 + max(0, rank))`` (``bm25RankToScore``). FTS5's rank is negative for
  matches, so every keyword match scores 1.0: the text arm adds 0.3 to whatever it finds.
* **Merge**: by chunk id, ``0.7 x vector + 0.3 x text`` (a missing arm scores 0), each arm bringing
  ``min(200, limit x 4)`` candidates (``candidateMultiplier``); memories by their best chunk.

Modes: ``hybrid`` (the merge above), ``dense`` (the vector arm alone), ``dense_knn`` (sqlite-vec's own
KNN, ``WHERE embedding MATCH ? AND k = ?``, also exact), ``fts`` (the keyword arm alone, AND query,
by rank) and ``fts_or`` (the same tokens OR-ed, ranked by ``bm25()``: FTS5's BM25 as a ranker).

Decay, MMR and the 0.35 floor are left out: they reorder or cut the top few results of dated
notes and add no search cost worth measuring here (Teleo's ``openclaw`` profile keeps them).
Python's ``sqlite3`` is used when it can load extensions, else ``pysqlite3`` (its wheel bundles a
recent SQLite with FTS5 and extension loading).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import time
from pathlib import Path

import numpy as np

from bench.peers.base import PeerCorpus, PeerQueries, PeerUnavailable, dedupe_chunks

_FTS_TOKEN = re.compile(r"\w+")  # [\p{L}\p{N}_]+ in JavaScript


def _sqlite():
    """A DB-API module whose connections can load sqlite-vec, or PeerUnavailable saying why not."""
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import pysqlite3.dbapi2 as sqlite  # type: ignore[import-not-found]
    except ImportError as exc:
        raise PeerUnavailable("this Python's sqlite3 cannot load extensions (sqlite-vec) and pysqlite3-binary is "
                              f"not installed ({exc}); `make bench-venv` installs it") from exc
    return sqlite


def fts_query(raw: str, joiner: str = " AND ") -> str | None:
    """OpenClaw's ``buildFtsQuery``: quoted tokens joined by AND (or OR)."""
    tokens = [t for t in _FTS_TOKEN.findall(raw) if t.strip()]
    if not tokens:
        return None
    return joiner.join('"' + t.replace('"', '""') + '"' for t in tokens)


def bm25_rank_to_score(rank: float) -> float:
    normalized = max(0.0, rank) if np.isfinite(rank) else 999.0
    return 1.0 / (1.0 + normalized)


class OpenClawSQLitePeer:
    name = "openclaw_sqlite"
    modes = ("hybrid", "dense", "dense_knn", "fts", "fts_or")
    exact_modes = {"dense": "dense", "dense_knn": "dense"}

    def __init__(self, vector_weight: float = 0.7, text_weight: float = 0.3, candidate_multiplier: int = 4,
                 max_candidates: int = 200, oversample: int = 2) -> None:
        self.sqlite = _sqlite()
        try:
            import sqlite_vec  # noqa: F401
        except ImportError as exc:
            raise PeerUnavailable(f"sqlite-vec not installed ({exc}); `make bench-venv` installs the peers") from exc
        total = vector_weight + text_weight
        self.vector_weight, self.text_weight = vector_weight / total, text_weight / total
        self.candidate_multiplier, self.max_candidates = candidate_multiplier, max_candidates
        self.oversample = oversample
        self.db = None
        self.corpus: PeerCorpus | None = None

    def version(self) -> str:
        sqlite_version = self.db.execute("select sqlite_version()").fetchone()[0] if self.db else "?"
        return f"SQLite {sqlite_version} FTS5, sqlite-vec {md.version('sqlite-vec')}"

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import sqlite_vec

        self.corpus = corpus
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "openclaw.sqlite"
        path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        db = self.sqlite.connect(str(path), check_same_thread=False)
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
        dim = int(corpus.dense.shape[1])
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, doc INTEGER NOT NULL, text TEXT NOT NULL)")
        db.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id')")
        db.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(id INTEGER PRIMARY KEY, embedding float[{dim}])")
        step = 2000
        with db:
            for lo in range(0, corpus.n_chunks, step):
                hi = min(lo + step, corpus.n_chunks)
                rows = [(c, int(corpus.chunk_doc[c]), corpus.chunk_texts[c]) for c in range(lo, hi)]
                db.executemany("INSERT INTO chunks (id, doc, text) VALUES (?, ?, ?)", rows)
                db.executemany("INSERT INTO chunks_fts (rowid, text) VALUES (?, ?)", [(c, t) for c, _, t in rows])
                db.executemany("INSERT INTO chunks_vec (id, embedding) VALUES (?, ?)",
                               [(c, corpus.dense[c].astype(np.float32).tobytes()) for c in range(lo, hi)])
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        db.commit()
        self.db = db
        return time.perf_counter() - t0

    # --- arms ----------------------------------------------------------------------------------

    def vector_arm(self, q: np.ndarray, limit: int) -> list[tuple[int, float]]:
        rows = self.db.execute("SELECT id, vec_distance_cosine(embedding, ?) AS dist FROM chunks_vec "
                               "ORDER BY dist ASC LIMIT ?", (q.astype(np.float32).tobytes(), limit)).fetchall()
        return [(int(i), 1.0 - float(d)) for i, d in rows]

    def knn_arm(self, q: np.ndarray, limit: int) -> list[tuple[int, float]]:
        rows = self.db.execute("SELECT id, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ? "
                               "ORDER BY distance", (q.astype(np.float32).tobytes(), limit)).fetchall()
        # vec0's default metric is L2; on unit vectors cosine = 1 - d^2 / 2 keeps the same order.
        return [(int(i), 1.0 - float(d) ** 2 / 2.0) for i, d in rows]

    def text_arm(self, text: str, limit: int, joiner: str = " AND ") -> list[tuple[int, float]]:
        match = fts_query(text, joiner)
        if match is None:
            return []
        rows = self.db.execute("SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                               "ORDER BY rank LIMIT ?", (match, limit)).fetchall()
        return [(int(i), float(r)) for i, r in rows]

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        assert self.db is not None and self.corpus is not None
        limit = min(k * self.oversample, self.corpus.n_chunks)
        if mode == "dense":
            rows = [c for c, _ in self.vector_arm(queries.dense[j], limit)]
        elif mode == "dense_knn":
            rows = [c for c, _ in self.knn_arm(queries.dense[j], limit)]
        elif mode in ("fts", "fts_or"):
            rows = [c for c, _ in self.text_arm(queries.texts[j], limit, " AND " if mode == "fts" else " OR ")]
        elif mode == "hybrid":
            cand = min(self.max_candidates, k * self.candidate_multiplier)
            merged: dict[int, float] = {}
            for c, s in self.vector_arm(queries.dense[j], cand):
                merged[c] = self.vector_weight * s
            for c, rank in self.text_arm(queries.texts[j], cand):
                merged[c] = merged.get(c, 0.0) + self.text_weight * bm25_rank_to_score(rank)
            rows = sorted(merged, key=lambda c: (-merged[c], c))
        else:
            raise ValueError(f"openclaw_sqlite has no mode {mode!r}")
        return dedupe_chunks(rows, self.corpus.chunk_doc, k)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
