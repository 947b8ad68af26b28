"""The query router (HippoRAG stage 1): which kind of question this is, and so which strategies run.

Routes, decided by indicator phrases in this order (first match wins):

- ``skip`` (``skip_reason = no_retrieval_needed``): the whole query is a greeting, a thanks or a
  farewell ("hi", "thanks!", "good morning"), or a question about the assistant itself ("who are
  you", "what can you do"). Nothing is retrieved.
- ``exploratory``: a broad request for everything on a subject: "everything about", "all about",
  "tell me about", "history of", "overview of", "summary of", "summarize", "what do we know about",
  "list all", "timeline of".
- ``multi_hop``: a question that spans relations: "why", "because", "cause(d) by", "led to",
  "influenced", "related to", "relationship between", "connection between", "in common", "both",
  "affect(ed)", "impact", "as a result", "after ... what"; or one naming two or more entities.
- ``simple``: everything else.

A repeated identical query is answered from the result cache before the pipeline runs; the summary
then says ``route = skip`` and ``skip_reason = cache_hit`` (``MemoryCore``). The route selects the
strategies (``PipelineSettings.routes``); the third attempt of a bounded retry takes the next
broader route (``simple`` -> ``multi_hop`` -> ``exploratory``).
"""

from __future__ import annotations

import re

from teleo_server.entities import extract
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import Candidates, State

ROUTES = ("simple", "multi_hop", "exploratory", "skip")
NO_RETRIEVAL = "no_retrieval_needed"

_SMALL_TALK = re.compile(
    r"^\s*(?:(?:hi|hello|hey|hiya|yo|howdy|greetings|good\s+(?:morning|afternoon|evening|night)|"
    r"thanks|thank\s+you|thx|ty|cheers|ok(?:ay)?|cool|great|nice|bye|goodbye|see\s+you|"
    r"how\s+are\s+you(?:\s+doing)?|what'?s\s+up|who\s+are\s+you|what\s+are\s+you|"
    r"what\s+can\s+you\s+do|what\s+do\s+you\s+do|are\s+you\s+(?:there|a\s+bot|an?\s+ai))"
    r"(?:\s+(?:there|again|so\s+much|a\s+lot|all|everyone|team|buddy))?[\s!.?,]*)+$",
    re.IGNORECASE)
_EXPLORATORY = re.compile(
    r"\b(?:everything|anything|all)\s+(?:about|on|regarding)\b|\btell\s+me\s+about\b|\bhistory\s+of\b|"
    r"\boverview\s+of\b|\bsummar(?:y|ise|ize)\b|\bwhat\s+do\s+(?:we|i|you)\s+know\s+about\b|\blist\s+(?:all|every)\b|"
    r"\btimeline\s+of\b|\ball\s+the\s+times\b",
    re.IGNORECASE)
_MULTI_HOP = re.compile(
    r"\bwhy\b|\bbecause\b|\bcaus(?:e|ed|es|ing)\b|\bled\s+to\b|\blead\s+to\b|\binfluenc(?:e|ed|es)\b|"
    r"\brelated\s+to\b|\brelationship\s+between\b|\bconnection\s+between\b|\bin\s+common\b|\bboth\b|"
    r"\baffect(?:s|ed)?\b|\bimpact(?:s|ed)?\b|\bas\s+a\s+result\b|\bresult(?:ed)?\s+in\b|\bafter\b.*\bwhat\b",
    re.IGNORECASE)


def classify(text: str) -> tuple[str, str]:
    """(route, skip_reason) of a query text; skip_reason is "" unless the route is ``skip``."""
    if not text.strip() or _SMALL_TALK.match(text):
        return "skip", NO_RETRIEVAL
    if _EXPLORATORY.search(text):
        return "exploratory", ""
    if _MULTI_HOP.search(text):
        return "multi_hop", ""
    named = [e for e in extract(text) if e.kind in ("proper", "identifier", "quoted")]
    if len(named) >= 2:
        return "multi_hop", ""
    return "simple", ""


@stage("route")
def route(state: State) -> str:
    """Classify the query; a ``skip`` route leaves no candidates."""
    forced = state.report.get("force_route")
    if forced:
        kind, reason = str(forced), ""
    elif state.ctx.query.text:
        kind, reason = classify(state.ctx.query.text)
    else:
        kind, reason = "simple", ""  # a query given as vectors only has no text to route by
    state.report["route"] = kind
    state.report["skip_reason"] = reason
    if kind == "skip":
        state.cands = Candidates.empty()
        return f"route=skip reason={reason}"
    return f"route={kind} strategies={'+'.join(state.cfg.routes.get(kind, ()))}"


__all__ = ["NO_RETRIEVAL", "ROUTES", "classify", "route"]
