"""E5 causal, asymmetric: a memory's cause spans and effect spans as two sides of one BM25 field.

The spans come from causal connectives (:mod:`teleo_server.extract.causal`): "the deploy failed
because the disk was full" has the cause "the disk was full" and the effect "the deploy failed".
Each side's words are kept apart (``c:disk`` is not ``e:disk``). A question's direction picks the
side: "why did the deploy fail?" matches "deploy fail" against effects and finds the memory that
holds the cause; "what happens if the disk is full?" matches against causes. A question with no
causal direction gets nothing from this space.

``causes`` links count too: when A ``causes`` B, a question asking why B happened finds A (B's
text matched against the question), and one asking what A led to finds B, whatever either text
says. Similarity (Compare) is directed: how well A's effects explain B, or B's causes name A —
compare(A, B) is not compare(B, A).

The seed embeds cause and effect spans with a causal model; none can be installed offline, so
the spans are matched lexically (BM25 over analysed words, English connectives).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.compute.sets import group_max
from teleo_server.domain import EmbeddingSet, LinkType, Memory
from teleo_server.extract import causal
from teleo_server.index.catalog import Catalog
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext
from teleo_server.spaces.fielded import FieldSettings, FieldSpace
from teleo_server.spaces.registry import register

CAUSE, EFFECT = "c:", "e:"


class CausalSettings(FieldSettings):
    link_coverage: float = Field(0.5, gt=0, le=1)  # share of the question's words a linked memory must hold


@register
class CausalSpace(FieldSpace):
    name = "E5_causal"
    description = "cause and effect spans (connectives, causes links), matched in the question's direction"
    Settings = CausalSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.effects_of: dict[str, set[str]] = defaultdict(set)  # memory id -> ids it causes
        self.causes_of: dict[str, set[str]] = defaultdict(set)   # memory id -> ids that cause it

    def document_terms(self, memory: Memory) -> Mapping[str, float]:
        counts: Counter[str] = Counter()
        for pair in causal.pairs(memory.content):
            counts.update(CAUSE + w for w in self.content_words(pair.cause))
            counts.update(EFFECT + w for w in self.content_words(pair.effect))
        return counts

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        super().add(row, chunk_rows, memory, embeddings)
        for link in memory.links:
            if link.type == LinkType.CAUSES:
                self.effects_of[memory.id].add(link.target_id)
                self.causes_of[link.target_id].add(memory.id)

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        super().remove(rows, chunk_rows)
        for row in rows.tolist():
            mid = self.catalog.id_of(row)
            for target in self.effects_of.pop(mid, ()):
                sources = self.causes_of.get(target)
                if sources is not None:
                    sources.discard(mid)
                    if not sources:
                        del self.causes_of[target]

    # ---- reads -----------------------------------------------------------------------------------
    def query_terms(self, ctx: QueryContext) -> Mapping[str, float] | None:
        d = causal.direction(ctx.query.text)
        return self._asked(d) if d is not None else None

    def _asked(self, d: causal.Direction) -> dict[str, float]:
        """The subject's words on the side it is matched against: effects when the question asks
        for causes, causes when it asks for effects."""
        side = EFFECT if d.seek == "cause" else CAUSE
        return {side + w: 1.0 for w in self.content_words(d.subject)}

    def prepare(self, ctx: QueryContext) -> Any | None:
        d = causal.direction(ctx.query.text) if ctx.query.text else None
        if d is None:
            return None
        feats = self.features(self._asked(d))
        words = set(self.content_words(d.subject))
        links = self.effects_of if d.seek == "effect" else self.causes_of
        if feats is None and not (words and links):
            return None
        return feats, d.seek, words

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        field_feats, seek, words = feats
        out = super().all_scores(ctx, field_feats) if field_feats is not None else np.zeros(self.catalog.n_rows, np.float32)
        linked = self._linked_scores(ctx, seek, words)
        if linked:
            top = float(out.max(initial=0.0)) or 1.0
            rows = np.fromiter(linked, dtype=np.int64, count=len(linked))
            vals = np.fromiter(linked.values(), dtype=np.float32, count=len(linked)) * top
            out[rows] = np.maximum(out[rows], vals)
        return out

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        """The spans' BM25 hits, joined by the linked answers (as :meth:`all_scores` scores them)."""
        field_feats, seek, words = feats
        if field_feats is not None:
            rows, scores = super().reached_scores(ctx, field_feats)
        else:
            rows, scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        linked = self._linked_scores(ctx, seek, words)
        if not linked:
            return rows, scores
        top = float(scores.max(initial=0.0)) or 1.0
        l_rows = np.fromiter(linked, dtype=np.int64, count=len(linked))
        l_vals = np.fromiter(linked.values(), dtype=np.float32, count=len(linked)) * top
        return group_max(np.concatenate([rows, l_rows]), np.concatenate([scores, l_vals]))

    def _linked_scores(self, ctx: QueryContext, seek: str, words: set[str]) -> dict[int, float]:
        """Memories linked by ``causes`` to a memory whose text names the question's subject: the
        causes of it (seek "cause") or its effects (seek "effect"), scored by the share of the
        subject's words the named memory holds."""
        if not words:
            return {}
        # seek "cause": the subject is an effect B, answers are the A with A causes B
        named_to_answers = self.causes_of if seek == "cause" else self.effects_of
        row_of, readable = self.catalog.row_of, ctx.readable if ctx.readable is not None else self.catalog.alive
        out: dict[int, float] = {}
        for named, answers in named_to_answers.items():
            r = row_of.get(named)
            if r is None or not readable[r]:
                continue
            cover = len(words & set(self.content_words(self.catalog.content(r)))) / len(words)
            if cover < self.config.link_coverage:
                continue
            for answer in answers:
                a = row_of.get(answer)
                if a is not None and ctx.mask[a]:
                    out[a] = max(out.get(a, 0.0), cover)
        return out

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """How well memory ``a`` leads to each of ``rows``: 1 for a ``causes`` link from a, else the
        best of (a's effects against b's words, a's words against b's causes), in [0, 1]; NaN when
        neither side has causal structure. Directed: similarity(a, b) != similarity(b, a)."""
        ma = self.catalog.memory(a)
        pairs_a = causal.pairs(ma.content)
        eff_a = Counter(w for p in pairs_a for w in self.content_words(p.effect))
        text_a = Counter(self.content_words(ma.content))
        out = np.full(rows.size, np.nan, dtype=np.float32)
        for i, r in enumerate(rows.tolist()):
            mb = self.catalog.memory(int(r))
            if mb.id in self.effects_of.get(ma.id, ()):
                out[i] = 1.0
                continue
            pairs_b = causal.pairs(mb.content)
            cause_b = Counter(w for p in pairs_b for w in self.content_words(p.cause))
            if not eff_a and not cause_b:
                continue
            out[i] = max(_cosine(eff_a, Counter(self.content_words(mb.content))), _cosine(text_a, cause_b))
        return out


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    if not a or not b:
        return 0.0
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = sum(v * v for v in a.values()) ** 0.5
    nb = sum(v * v for v in b.values()) ** 0.5
    return float(min(dot / (na * nb), 1.0))


__all__ = ["CausalSettings", "CausalSpace"]
