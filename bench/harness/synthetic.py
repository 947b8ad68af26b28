"""Synthetic memory corpora with the structure of real ones, for scale points no model can embed.

Embedding a million texts on two cores takes hours, so the scale workload feeds the pipeline
precomputed vectors drawn from a generative model fitted by eye to what the real models produce
on SciFact and LoCoMo:

* **Topics.** ``n_topics`` cluster centres on the unit sphere; a memory's sentence vector is its
  topic centre plus isotropic noise, re-normalised (cosine to its centre ~0.6-0.7, to unrelated
  memories ~0, as MiniLM gives).
* **Words.** Text is pseudo-words (``w<id>``, which the lexical tokenizer keeps whole) drawn from
  a Zipf law over ``vocab`` types; half of the words come from a topic-specific permutation of
  the vocabulary, so words and vectors agree on topic the way real text and embeddings do.
* **Length.** Word counts are log-normal (median ``median_words``), like chat turns and notes.
* **SPLADE.** A memory's learned-sparse vector is its distinct words mapped into a 30,522-id
  vocabulary plus a few topic "expansion" terms, weights ``log1p`` of counts times a rarity factor.
* **Per-token vectors.** One float16 row per word (capped at ``max_tokens``) near the sentence
  vector, for late interaction. With ``real_token_counts`` every word keeps its row (no cap) and
  the rows are not held: ``embedding(i)`` draws memory ``i``'s rows from a generator seeded by
  ``(seed, i)``, so a million memories with their real token counts stream through the index
  without the 25+ GB their float16 rows would take.

Queries are built from a target memory (a subset of its words, its vector plus noise), so each
query has one known relevant memory: enough for sanity checks, never reported as quality.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet

SPLADE_VOCAB = 30_522
TOKEN_NOISE = 1.2  # a token's noise norm relative to its unit sentence vector


@dataclass(frozen=True, slots=True)
class CorpusSpec:
    n: int
    dim: int = 384
    n_topics: int = 0          # 0 = about sqrt(n)
    vocab: int = 50_000
    zipf_a: float = 1.1
    median_words: float = 28.0
    sigma_words: float = 0.7
    max_words: int = 400
    topic_noise: float = 1.1   # noise norm relative to the unit centre
    topic_word_share: float = 0.5
    expansion_terms: int = 6
    max_tokens: int = 48       # per-token vectors kept per memory (late interaction)
    real_token_counts: bool = False  # one row per word, uncapped, drawn on demand (not held)
    seed: int = 0


@dataclass(slots=True)
class SyntheticCorpus:
    """Arrays for ``n`` memories.

    texts: list[str] (n,); topics int32 (n,); dense float32 (n, dim) L2-normalised;
    sp_ptr int64 (n+1,), sp_ids int32 (S,), sp_w float32 (S,) CSR learned-sparse rows;
    tok_ptr int64 (n+1,), tokens float16 (T, dim) per-token rows, or None when they are drawn on
    demand (``spec.real_token_counts``; read them with :meth:`token_rows`).
    """

    spec: CorpusSpec
    texts: list[str]
    topics: np.ndarray
    dense: np.ndarray
    sp_ptr: np.ndarray
    sp_ids: np.ndarray
    sp_w: np.ndarray
    tok_ptr: np.ndarray
    tokens: np.ndarray | None
    word_ids: list[np.ndarray]
    centres: np.ndarray
    topic_perm: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def token_rows(self, i: int) -> np.ndarray:
        """float16 (tok_ptr[i+1] - tok_ptr[i], dim): memory ``i``'s per-token vectors."""
        if self.tokens is not None:
            return self.tokens[self.tok_ptr[i]:self.tok_ptr[i + 1]]
        rng = np.random.default_rng((self.spec.seed, i))
        count = int(self.tok_ptr[i + 1] - self.tok_ptr[i])
        noise = rng.standard_normal((count, self.spec.dim), dtype=np.float32) * np.float32(TOKEN_NOISE / np.sqrt(self.spec.dim))
        return _unit(self.dense[i] + noise).astype(np.float16)

    def embedding(self, i: int, model_version: str = "synthetic", with_tokens: bool = True) -> EmbeddingSet:
        """One-chunk EmbeddingSet of memory ``i`` (host numpy views)."""
        toks = self.token_rows(i) if with_tokens else np.zeros((0, self.spec.dim), np.float16)
        return EmbeddingSet(model_version, [ChunkEmbedding.from_models(
            self.dense[i], toks, self.sp_ids[self.sp_ptr[i]:self.sp_ptr[i + 1]],
            self.sp_w[self.sp_ptr[i]:self.sp_ptr[i + 1]], start=0, end=len(self.texts[i]))])

    def sparse_row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.sp_ids[self.sp_ptr[i]:self.sp_ptr[i + 1]], self.sp_w[self.sp_ptr[i]:self.sp_ptr[i + 1]]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _zipf_sampler(rng: np.random.Generator, vocab: int, a: float):
    # Bounded Zipf by inverse CDF over ranks 1..vocab (numpy's zipf is unbounded).
    p = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** a
    cdf = np.cumsum(p / p.sum())

    def draw(size: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(size)), vocab - 1).astype(np.int64)

    return draw


def _splade_of(words: np.ndarray, perm: np.ndarray, vocab: int, expansions: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    uniq, counts = np.unique(words, return_counts=True)
    # Rarer words (higher rank) weigh more, as SPLADE learns an idf-like prior.
    w = np.log1p(counts) * (0.6 + 0.4 * np.log1p(uniq) / np.log1p(vocab))
    ids = (uniq * 2654435761 % SPLADE_VOCAB).astype(np.int64)
    exp_ids = (perm[rng.integers(0, 200, expansions)] * 2654435761 % SPLADE_VOCAB).astype(np.int64)
    ids = np.concatenate([ids, exp_ids])
    w = np.concatenate([w, rng.uniform(0.1, 0.5, expansions)])
    order = np.argsort(ids, kind="stable")
    ids, w = ids[order], w[order]
    keep = np.ones(ids.size, bool)
    keep[1:] = ids[1:] != ids[:-1]  # duplicate ids after hashing: keep the first
    return ids[keep].astype(np.int32), w[keep].astype(np.float32)


def make_corpus(spec: CorpusSpec) -> SyntheticCorpus:
    """Generate ``spec.n`` memories (deterministic for a given spec, seed included)."""
    rng = np.random.default_rng(spec.seed)
    n_topics = spec.n_topics or max(8, int(np.sqrt(spec.n)))
    centres = _unit(rng.standard_normal((n_topics, spec.dim)))
    topic_weights = 1.0 / np.arange(1, n_topics + 1) ** 0.8  # some topics are much more common
    topics = rng.choice(n_topics, spec.n, p=topic_weights / topic_weights.sum()).astype(np.int32)
    noise = rng.standard_normal((spec.n, spec.dim)).astype(np.float32)
    noise *= spec.topic_noise / np.sqrt(spec.dim)
    dense = _unit(centres[topics] + noise)

    draw = _zipf_sampler(rng, spec.vocab, spec.zipf_a)
    topic_perm = rng.permuted(np.tile(np.arange(spec.vocab), (n_topics, 1)), axis=1)
    lengths = np.clip(rng.lognormal(np.log(spec.median_words), spec.sigma_words, spec.n), 3, spec.max_words).astype(np.int64)
    total = int(lengths.sum())
    ranks = draw(total)
    from_topic = rng.random(total) < spec.topic_word_share
    owners = np.repeat(np.arange(spec.n), lengths)
    words_all = np.where(from_topic, topic_perm[topics[owners], ranks], ranks)
    bounds = np.concatenate([[0], np.cumsum(lengths)])

    texts: list[str] = []
    word_ids: list[np.ndarray] = []
    sp_ids, sp_w, sp_len = [], [], []
    tok_len = lengths if spec.real_token_counts else np.minimum(lengths, spec.max_tokens)
    for i in range(spec.n):
        words = words_all[bounds[i]:bounds[i + 1]]
        word_ids.append(words)
        texts.append(" ".join(f"w{w}" for w in words.tolist()))
        ids, w = _splade_of(words, topic_perm[topics[i]], spec.vocab, spec.expansion_terms, rng)
        sp_ids.append(ids)
        sp_w.append(w)
        sp_len.append(ids.size)
    tok_ptr = np.concatenate([[0], np.cumsum(tok_len)]).astype(np.int64)
    tokens = None if spec.real_token_counts else _held_tokens(rng, dense, tok_len, tok_ptr, spec.dim)
    return SyntheticCorpus(
        spec=spec, texts=texts, topics=topics, dense=dense,
        sp_ptr=np.concatenate([[0], np.cumsum(sp_len)]).astype(np.int64),
        sp_ids=np.concatenate(sp_ids), sp_w=np.concatenate(sp_w),
        tok_ptr=tok_ptr, tokens=tokens, word_ids=word_ids, centres=centres, topic_perm=topic_perm,
    )


def _held_tokens(rng: np.random.Generator, dense: np.ndarray, tok_len: np.ndarray, tok_ptr: np.ndarray,
                 dim: int) -> np.ndarray:
    tok_owner = np.repeat(np.arange(dense.shape[0]), tok_len)
    tokens = np.empty((int(tok_ptr[-1]), dim), np.float16)
    # In blocks: float32 temporaries for 100K memories' tokens would need ~13 GB at once.
    block = 65_536
    for lo in range(0, tokens.shape[0], block):
        owners_b = tok_owner[lo:lo + block]
        noise_b = rng.standard_normal((owners_b.size, dim), dtype=np.float32) * np.float32(TOKEN_NOISE / np.sqrt(dim))
        tokens[lo:lo + block] = _unit(dense[owners_b] + noise_b)
    return tokens


@dataclass(slots=True)
class SyntheticQueries:
    """``m`` queries, each made from one target memory.

    targets int64 (m,); texts list[str]; dense float32 (m, dim); sparse: list of (ids int32, w float32);
    tokens: list of float16 (t, dim).
    """

    targets: np.ndarray
    texts: list[str]
    dense: np.ndarray
    sparse: list[tuple[np.ndarray, np.ndarray]]
    tokens: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.texts)

    def embedding(self, j: int, model_version: str = "synthetic") -> EmbeddingSet:
        ids, w = self.sparse[j]
        return EmbeddingSet(model_version, [ChunkEmbedding.from_models(
            self.dense[j], self.tokens[j], ids, w, start=0, end=len(self.texts[j]))])


def make_queries(corpus: SyntheticCorpus, m: int, seed: int = 1, words: int = 8,
                 noise: float = 1.0) -> SyntheticQueries:
    """Queries of ``words`` words sampled from a target memory, vectors near the target's."""
    rng = np.random.default_rng(seed)
    dim = corpus.spec.dim
    targets = rng.choice(len(corpus), m, replace=False if m <= len(corpus) else True).astype(np.int64)
    texts, sparse, tokens = [], [], []
    dense = _unit(corpus.dense[targets] + rng.standard_normal((m, dim)).astype(np.float32) * (noise / np.sqrt(dim)))
    for j, t in enumerate(targets):
        src = corpus.word_ids[t]
        pick = rng.choice(src, min(words, src.size), replace=False)
        texts.append(" ".join(f"w{w}" for w in pick.tolist()))
        ids, w = _splade_of(pick, corpus.topic_perm[corpus.topics[t]], corpus.spec.vocab, 2, rng)
        sparse.append((ids, w))
        tk = dense[j] + rng.standard_normal((pick.size, dim)).astype(np.float32) * (TOKEN_NOISE / np.sqrt(dim))
        tokens.append(_unit(tk).astype(np.float16))
    return SyntheticQueries(targets, texts, dense, sparse, tokens)
