"""E11 entity: an index of the named entities each memory mentions, reached from a query by any of
their written forms.

Entities come from :mod:`teleo_server.entities` (proper names, quoted terms, identifiers,
quantities), whose keys already fold case, accents, possessives and spacing (``José Müller`` and
``jose muller`` are one key). A multi-word name is also indexed under its initials
(``International Business Machines`` under ``ibm``). A query reaches an entity by

- the entities it names itself (exact keys),
- any run of one to four of its words that is a known key (a typed, lower-case query),
- a spelling variant: a run whose character trigrams overlap a known key's by at least
  ``fuzzy_threshold`` (Jaccard), weighed by that overlap (``Melany`` reaches ``melanie``),
- part of a longer name: a word of a multi-word key (``Müller`` reaches ``josé müller``), weighed
  by ``partial_weight``;

and memories are scored by BM25 over the entities reached (rarer entities weigh more). Unlike the
memory graph (E8), which walks from exact keys through shared entities and links, this space ranks
memories by the entities they name themselves. Only keys found in memories the caller may read are
matched, so another tenant's names never shape a query.

The seed links entities with a learned model (and TransE over typed relations); offline this is
rule-based extraction with alias folding and trigram fuzzy matching.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.analysis import ENGLISH_STOPWORDS
from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.entities import PROPER, extract, normalize_key
from teleo_server.index.catalog import Catalog
from teleo_server.index.keyed import KeyedPostings
from teleo_server.index.terms import TermTable
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext
from teleo_server.spaces.fielded import FieldSettings, FieldSpace
from teleo_server.spaces.registry import register

_CONNECTORS = frozenset("of de del della di da dos das du des van von der den la le the and &".split())


class EntitySettings(FieldSettings):
    max_entities: int = Field(64, ge=1)                  # entities kept per memory
    fuzzy_threshold: float = Field(0.5, gt=0, le=1)      # trigram Jaccard for a spelling variant
    partial_weight: float = Field(0.5, ge=0, le=1)       # one word of a multi-word name
    max_keys_per_word: int = Field(50, ge=1)             # a word in more names than this is not a partial match
                                                         # (for a caller who reads every memory)
    max_query_words: int = Field(48, ge=1)               # query words read (a pasted page is not all names)
    max_fuzzy: int = Field(16, ge=0)                     # query names and words looked up for spelling variants
    # an entity on more than this share of the memories (a speaker named on every dialog turn) tells
    # memories apart no better than a common word: the query does not ask for it
    max_df_fraction: float = Field(0.05, gt=0, le=1)
    min_df_cap: int = Field(10, ge=1)                    # ... but a name on this many memories always counts


def _shared(postings: KeyedPostings, grams: set[int], least: int) -> list[tuple[int, int]]:
    """(id, how many of ``grams`` it is posted under) of every id posted under at least ``least``
    of them. An id (a name or a word) is posted once under each of its trigrams, so that count is
    the trigrams it shares with ``grams``."""
    ids = postings.lookup(np.fromiter(grams, dtype=np.int64, count=len(grams)))
    if not ids.size:
        return []
    counts = np.bincount(ids)
    hits = np.flatnonzero(counts >= least)
    return list(zip(hits.tolist(), counts[hits].tolist()))


def _trigrams(key: str) -> set[int]:
    """The character trigrams of ``key`` padded as "  key ", each as one int (three code points of
    21 bits)."""
    k = [ord(c) for c in f"  {key} "]
    return {(k[i] << 42) | (k[i + 1] << 21) | k[i + 2] for i in range(len(k) - 2)}


def initials(key: str) -> str:
    """The acronym of a multi-word name ("" when it has fewer than two content words)."""
    words = [w for w in key.split() if w not in _CONNECTORS]
    return "".join(w[0] for w in words) if len(words) >= 2 and all(w[0].isalpha() for w in words) else ""


@register
class EntitySpace(FieldSpace):
    name = "E11_entity"
    description = "named entities (aliases, spelling variants, initials, partial names) indexed per memory"
    Settings = EntitySettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        # Trigram postings in one CSR each (4 bytes a posting): a dict of an array per trigram and
        # of a list of words per word trigram held 1.4 KB a SciFact memory, this about 0.4
        self._grams = KeyedPostings()                         # trigram -> key ids
        self._key_grams = array("I")                          # key id -> its trigram count
        self._word_id = TermTable()                           # word of a multi-word key -> word id
        self._word_keys = KeyedPostings()                     # word id -> key ids
        self._word_grams = KeyedPostings()                    # trigram -> word ids
        self._word_sizes = array("I")                         # word id -> its trigram count
        self._indexed = 0                                     # keys of the field's vocabulary seen so far

    def document_terms(self, memory: Memory) -> Mapping[str, float]:
        counts: Counter[str] = Counter()
        for e in extract(memory.content, self.config.max_entities):
            counts[e.key] += 1.0
            if e.kind == PROPER and (acronym := initials(e.key)):
                counts[acronym] += 1.0
        return counts

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        super().add(row, chunk_rows, memory, embeddings)
        terms = self.field.terms
        for tid in range(self._indexed, len(terms)):
            key = terms[tid]
            grams = _trigrams(key)
            self._key_grams.append(len(grams))
            self._grams.add(grams, tid)
            words = key.split()
            if len(words) > 1:
                ids = []
                for w in words:
                    if w not in _CONNECTORS and w not in ENGLISH_STOPWORDS and len(w) > 2:
                        wid = self._word_id.get(w)
                        if wid is None:
                            wid = self._word_id.add(w)  # the next id: len(self._word_sizes)
                            grams = _trigrams(w)
                            self._word_sizes.append(len(grams))
                            self._word_grams.add(grams, wid)
                        ids.append(wid)
                for wid in dict.fromkeys(ids):  # a word twice in one name counts once
                    self._word_keys.add((wid,), tid)
        self._indexed = len(terms)

    def settle(self) -> None:
        super().settle()
        for postings in (self._grams, self._word_keys, self._word_grams):
            postings.merge()
        self._word_id.settle()

    # ---- query side --------------------------------------------------------------------------------
    def _runs(self, text: str) -> list[str]:
        """Runs of one to four of the query's first ``max_query_words`` words (not all stop words)."""
        words = [w.strip(".,;:!?\"'()[]{}") for w in normalize_key(text).split()][: self.config.max_query_words]
        runs = []
        for n in (4, 3, 2, 1):
            for i in range(len(words) - n + 1):
                run = words[i : i + n]
                if not run[0] or not run[-1] or all(w in ENGLISH_STOPWORDS for w in run):
                    continue
                runs.append(" ".join(run))
        return runs

    def _fuzzy(self, run: str, postings: KeyedPostings, sizes: array) -> dict[int, float]:
        """The ids (names or words) ``postings`` (trigram -> ids) holds within ``fuzzy_threshold``
        of ``run``, with the trigram Jaccard of each; ``sizes`` gives each id's trigram count.

        Exact, and the same whoever else wrote names: a name at Jaccard >= t shares at least
        ceil(t x |run's trigrams|) of them (the Jaccard is at most shared / |run's trigrams|), so
        only names with that many shared trigrams, counted over the run's postings, are measured.
        (Re-deriving every candidate's trigrams took 20-40 ms for queries whose trigrams reach
        thousands of names.)"""
        grams = _trigrams(run)
        need = self.config.fuzzy_threshold
        must = max(int(np.ceil(need * len(grams))), 1)
        out = {}
        for hit, common in _shared(postings, grams, must):
            jac = common / (len(grams) + sizes[hit] - common)
            if jac >= need:
                out[hit] = jac
        return out

    def reached(self, text: str, sees_all: bool = True) -> dict[int, float]:
        """Key ids a query reaches, each with its weight in (0, 1]. A caller who may not read
        every memory gets no cap on the names one word reaches (a cap counts every tenant's names)."""
        vocab, cfg = self.field.vocab, self.config
        got: dict[int, float] = {}

        def take(tid: int, w: float) -> None:
            if w > got.get(tid, 0.0):
                got[tid] = w

        named = [e.key for e in extract(text, cfg.max_entities)]
        runs = self._runs(text)
        asked = list(dict.fromkeys((*named, *runs)))
        known = {key: tid for key, tid in zip(asked, vocab.ids_of(asked)) if tid is not None}  # one batch
        for tid in known.values():
            take(tid, 1.0)
        # spelling variants: of the names the query writes, and of its single words
        singles = [r for r in runs if " " not in r and len(r) >= 4 and r not in known and r not in self._word_id]
        for run in [k for k in named if k not in known][: cfg.max_fuzzy] + singles[: cfg.max_fuzzy]:
            for tid, jac in self._fuzzy(run, self._grams, self._key_grams).items():
                take(tid, jac)
        if cfg.partial_weight > 0:
            for word in dict.fromkeys(r for r in runs if " " not in r):
                if word in ENGLISH_STOPWORDS or len(word) <= 2:
                    continue
                wid = self._word_id.get(word)
                variants = {wid: 1.0} if wid is not None else (
                    self._fuzzy(word, self._word_grams, self._word_sizes) if len(word) >= 4 else {})
                for variant, jac in variants.items():
                    keys = self._word_keys.lookup(np.array([variant], dtype=np.int64))
                    if not sees_all or keys.size <= cfg.max_keys_per_word:
                        for tid in keys.tolist():
                            take(tid, cfg.partial_weight * jac)
        return got

    def query_terms(self, ctx: QueryContext) -> Mapping[str, float] | None:
        asked = self._asked(ctx)
        return dict(zip(self.field.vocab.terms_of(list(asked)), asked.values())) or None

    def prepare(self, ctx: QueryContext) -> Any | None:
        # the names reached are term ids already: no round trip through their strings
        return self.id_features(self._asked(ctx)) if ctx.query.text else None

    def _asked(self, ctx: QueryContext) -> dict[int, float]:
        """The key ids a query asks for and their weights: ``reached``, less the names too common
        (or unknown) among what the caller may read."""
        got = self.reached(ctx.query.text, ctx.sees_all or ctx.readable is None)
        if not got:
            return {}
        ids = np.fromiter(got, dtype=np.int64, count=len(got))
        if not ctx.sees_all and ctx.readable is not None:
            # document frequencies among what the caller may read: a name only another tenant
            # wrote is not reached at all, and another tenant's writes never make a name common
            which, rows, _ = self.field.index.postings(ids)
            df = np.bincount(which[ctx.readable[rows]], minlength=ids.size)
            n_docs = max(int(np.count_nonzero(self.field.doc_len.view[: ctx.readable.size][ctx.readable[: self.field.doc_len.n]])), 1)
        else:
            df, n_docs = self.field.df.view[ids], self.field.n_docs()
        keep = (df > 0) & (df <= max(self.config.max_df_fraction * n_docs, self.config.min_df_cap))
        return {t: got[t] for t in ids[keep].tolist()}


__all__ = ["EntitySettings", "EntitySpace", "initials"]
