"""The query analyzer and the perspectives recall.

``analyze`` reads the query's text and says which kinds of question it is (any of ``causal``,
``code``, ``entity``, ``intent``, ``keyword``, ``graph``; ``general`` when none), then sets the
weight of each kind's spaces for fusion (``PipelineSettings.query_types``: data, per kind, a weight
per space and a multiplicative boost per space). The kinds and the weights used are recorded in the
stage event and the retrieval summary. A request that names its own ``space_weights`` or a
``search_matrix`` keeps them (the analyzer records its reading and changes nothing); a request's
``query_type`` forces the kinds ("none" turns the analyzer off); a ``space_mask`` keeps the
analyzer to the spaces it names.

``perspectives`` lets every space of ``perspective_candidates`` that has a weight (or a boost) for
this query search the corpus: its top hits join the pool, and the whole pool gets its scores, so
the fusion that follows hears from it.
"""

from __future__ import annotations

import re

import numpy as np

from teleo_server.entities import IDENTIFIER, PROPER, QUOTED, extract
from teleo_server.extract import causal, code, intent
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State

KINDS = ("causal", "code", "entity", "intent", "keyword", "graph")

_CODE_WORDS = re.compile(r"\b(?:function|method|class|snippet|implementation|implement|source code|code|api|"
                         r"endpoint|stack ?trace|exception|regex|script|compile|syntax|import|module|variable)\b", re.I)
_LANG_WORDS = re.compile(r"\b(?:python|javascript|typescript|golang|rust|java|c\+\+|sql|bash|shell)\b", re.I)
_GRAPH_WORDS = re.compile(r"\b(?:both|in common|together|related to|relationship between|connected to|connection "
                          r"between|what else|who else|linked to|and also|besides)\b", re.I)
_QUESTION = re.compile(r"^\s*(?:who|what|when|where|why|how|which|whom|whose|is|are|was|were|do|does|did|can|could|"
                       r"should|would|will|has|have|had)\b|\?", re.I)


def classify(text: str) -> list[str]:
    """The kinds of question ``text`` is, in ``KINDS`` order ([] = general)."""
    if not text.strip():
        return []
    kinds = []
    if causal.direction(text) is not None:
        kinds.append("causal")
    if code.detect(text) is not None or _CODE_WORDS.search(text) or _LANG_WORDS.search(text):
        kinds.append("code")
    ents = [e for e in extract(text) if e.kind in (PROPER, QUOTED, IDENTIFIER)]
    if ents:
        kinds.append("entity")
    if intent.query_intent(text):
        kinds.append("intent")
    words = text.split()
    if len(words) <= 4 and not _QUESTION.search(text) or re.search(r"[\"“][^\"”]+[\"”]", text):
        kinds.append("keyword")
    if _GRAPH_WORDS.search(text) or len({e.key for e in ents if e.kind == PROPER}) >= 2:
        kinds.append("graph")
    return kinds


@stage("analyze")
def analyze(state: State) -> str:
    cfg, query = state.cfg, state.ctx.query
    forced = query.overrides.query_type
    if forced == "none":
        state.report["query_types"] = []
        return "off"
    kinds = [forced] if forced else classify(query.text)
    state.report["query_types"] = kinds or ["general"]
    kept = bool(query.overrides.space_weights) or bool(query.overrides.search_matrix)
    allowed = set(cfg.masked_spaces) if cfg.masked_spaces else set(state.spaces)
    if not kept:
        for kind in kinds or ["general"]:
            spec = cfg.query_types.get(kind)
            if spec is None:
                continue
            for name, w in spec.weights.items():
                if name in state.spaces and name in allowed:
                    cfg.space_weights[name] = max(cfg.space_weights.get(name, 0.0), w)
            for name, b in spec.boosts.items():
                if name in state.spaces and name in allowed:
                    cfg.space_boosts[name] = max(cfg.space_boosts.get(name, 0.0), b)
    state.report["space_weights"] = {n: w for n, w in cfg.space_weights.items() if w > 0}
    detail = "types=" + "+".join(kinds or ["general"]) + (" (request weights kept)" if kept else "")
    return detail + " weights=" + ",".join(f"{n.split('_')[0]}:{w:g}" for n, w in sorted(cfg.space_weights.items()) if w > 0)


@stage("perspectives")
def perspectives(state: State) -> str:
    c, cfg = state.cands, state.cfg
    joined = []
    for name, k in cfg.perspective_candidates.items():
        if name not in state.spaces or name in c.spaces or k <= 0:
            continue
        if cfg.space_weights.get(name, 0.0) <= 0 and cfg.space_boosts.get(name, 0.0) <= 0:
            continue
        feats = state.feature(name)
        if feats is None:
            continue
        rows, score_of = state.spaces[name].search_then_score(state.ctx, feats, k)
        pos = c.extend(np.asarray(rows, dtype=np.int64))
        found = np.zeros(c.size, dtype=bool)
        found[pos] = True
        c.set_space(name, score_of(c.rows), found)
        joined.append(f"{name.split('_')[0]}:{int(np.asarray(rows).size)}")
    return "joined=" + (",".join(joined) if joined else "none")


__all__ = ["KINDS", "analyze", "classify", "perspectives"]
