"""Cause and effect spans of a text, and the direction of a causal question.

A sentence is read for a causal connective; the text on either side is the cause and the effect:

- effect first: ``E because (of) C``, ``E due to C``, ``E owing to C``, ``E as a result of C``,
  ``E thanks to C``, ``E (was) caused / triggered / driven by C``, ``E resulted / stems from C``;
- cause first: ``C led / leads to E``, ``C resulted / results in E``, ``C caused / causes E``,
  ``C triggered E``, ``C, so E``, ``C; therefore / thus / hence / consequently E``,
  ``C, which is why E``, ``C, which meant E``;
- opening the sentence: ``Because C, E``, ``Due to C, E``, ``If C, (then) E``;
- across sentences: ``As a result, E``, ``Therefore E``, ``Consequently E``, ``That's why E``,
  ``So E`` take the previous sentence as the cause.

A question's direction (:func:`direction`): ``why did X``, ``what caused X``, ``the reason for X``
ask for causes (X is matched against effects); ``what happens if X``, ``the effect of X``, ``what
did X lead to`` ask for effects (X is matched against causes). English only; other languages give
no spans and no direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_END = r"[\s,;:.!?]*$"


@dataclass(frozen=True, slots=True)
class CausalPair:
    cause: str
    effect: str
    marker: str


_EFFECT_FIRST = re.compile(
    r"^(?P<effect>.+?)[\s,]+(?P<marker>because of|because|due to|owing to|as a result of|on account of|thanks to|"
    r"(?:was |were |is |are |been )?(?:caused|triggered|driven|brought on) by|resulted from|results from|result from|"
    r"stems from|stemmed from|comes from the fact that)\s+(?P<cause>.+)$", re.I)
_CAUSE_FIRST = re.compile(
    r"^(?P<cause>.+?)[\s,]+(?P<marker>led to|leads to|lead to|leading to|resulted in|results in|result in|resulting in|"
    r"caused|causes|causing|triggered|triggers|gave rise to|brought about|, so|; so|so that's why|"
    r"(?:;|,|\band)\s*(?:therefore|thus|hence|consequently)|which is why|that is why|which meant|which means)\s+"
    r"(?P<effect>.+)$", re.I)
_OPENING = re.compile(r"^(?P<marker>because of|because|due to|owing to|as a result of|if)\s+(?P<cause>[^,]+?),\s*"
                      r"(?:then\s+)?(?P<effect>.+)$", re.I)
_FOLLOWS = re.compile(r"^(?P<marker>as a result|therefore|consequently|hence|thus|that's why|that is why|so|"
                      r"because of (?:this|that)|due to (?:this|that))\b[\s,]*(?P<effect>.+)$", re.I)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_NOT_CAUSE = re.compile(r"^(?:the|a|an|this|that|its|their|our|my)$", re.I)


def _clean(span: str) -> str:
    return re.sub(_END, "", span.strip().strip("\"'“”‘’()")).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s and s.strip()]


def _pair(m: re.Match[str]) -> CausalPair | None:
    cause, effect = _clean(m.group("cause")), _clean(m.group("effect"))
    marker = " ".join(m.group("marker").lower().replace(",", " ").replace(";", " ").split())
    if len(cause) < 3 or len(effect) < 3 or _NOT_CAUSE.match(cause.split()[-1]):
        return None
    return CausalPair(cause, effect, marker)


def pairs(text: str, limit: int = 16) -> list[CausalPair]:
    """Cause/effect pairs of a text, in order (at most ``limit``)."""
    out: list[CausalPair] = []
    previous = ""
    for sentence in sentences(text):
        found = None
        m = _FOLLOWS.match(sentence)
        if m and previous:
            effect = _clean(m.group("effect"))
            if len(effect) >= 3:
                found = CausalPair(_clean(previous), effect, m.group("marker").lower())
        if found is None:
            for pattern in (_OPENING, _EFFECT_FIRST, _CAUSE_FIRST):
                m = pattern.match(sentence)
                if m and (found := _pair(m)) is not None:
                    break
        if found is not None:
            out.append(found)
            if len(out) >= limit:
                break
        previous = sentence
    return out


# ---- questions ------------------------------------------------------------------------------------
_ASKS_CAUSE = [re.compile(p, re.I) for p in (
    r"\b(?:why|how come)\s+(?:did|does|do|is|was|were|are|has|have|had|would|could|can|will)?\s*(?P<x>.+)",
    r"\bwhat\s+(?:caused|causes|cause|led to|leads to|triggered|triggers|made|is causing|was causing|brought about|"
    r"resulted in|drove)\s+(?P<x>.+)",
    r"\b(?:root cause|cause|causes|reason|reasons|origin|explanation)\s+(?:of|for|behind)\s+(?P<x>.+)",
    r"\b(?P<x>.+?)\s+(?:was|is|were|are)\s+(?:caused|triggered|driven)\s+by\s+what\b",
)]
_ASKS_EFFECT = [re.compile(p, re.I) for p in (
    r"\bwhat\s+(?:happens|happened|will happen|would happen|could happen|might happen|occurs)\s+(?:if|when|after|once)\s+(?P<x>.+)",
    r"\b(?:effect|effects|consequence|consequences|impact|impacts|result|results|outcome|outcomes|implications?)\s+"
    r"(?:of|from)\s+(?P<x>.+)",
    r"\bwhat\s+(?:did|does|do|will|would|could|might)\s+(?P<x>.+?)\s+(?:lead to|cause|result in|trigger|affect|break|bring about)\b",
    r"\bwhat\s+(?:came|comes|will come)\s+(?:of|from)\s+(?P<x>.+)",
    r"\bif\s+(?P<x>.+?),?\s+what\s+(?:happens|then|would happen|will happen)\b",
)]


@dataclass(frozen=True, slots=True)
class Direction:
    """``seek`` is "cause" (the question names an effect, X) or "effect" (it names a cause)."""

    seek: str
    subject: str


def direction(query: str) -> Direction | None:
    """The causal direction a question asks in, with the span it names; None when it asks none."""
    q = query.strip()
    for seek, patterns in (("effect", _ASKS_EFFECT), ("cause", _ASKS_CAUSE)):
        for p in patterns:
            m = p.search(q)
            if m:
                x = _clean(m.group("x"))
                if len(x) >= 3:
                    return Direction(seek, x)
    return None


__all__ = ["CausalPair", "Direction", "direction", "pairs", "sentences"]
