"""Stated intents: the goal clauses of a text ("trying to X", "in order to X", "the goal is X").

A clause runs from its marker to the end of the sentence or to a turn in it (``but``, ``because``,
``although``, ``, and``, ``, so``). :func:`clauses` reads a memory; :func:`query_intent` reads a
query, where task phrasings (``how do I X``, ``how to X``, ``help me X``, ``I need to X``) state an
intent as well. English only.
"""

from __future__ import annotations

import re

_MARKERS = (r"trying to|tried to|tries to|try to|attempting to|attempt to|want(?:s|ed)? to|wanna|would like to|"
            r"'d like to|in order to|so as to|so that|the goal (?:is|was)(?: to)?|my goal (?:is|was)(?: to)?|"
            r"our goal (?:is|was)(?: to)?|goal:|aim(?:s|ing|ed)? (?:to|for|at)|plan(?:s|ning|ned)? to|"
            r"intend(?:s|ed|ing)? to|hop(?:e|es|ing|ed) to|looking to|work(?:ing|s|ed)? towards?|"
            r"the (?:purpose|point|idea) (?:is|was)(?: to)?|objective:|purpose:|in the hope of|striv(?:e|es|ing) to|"
            r"determined to|set out to|working on getting")
_CLAUSE = re.compile(r"(?:^|\b)(?P<marker>" + _MARKERS + r")\s+(?P<clause>[^.;!?\n]+)", re.I)
_QUERY = re.compile(r"(?:^|\b)(?P<marker>" + _MARKERS + r"|how (?:do|can|could|should|would) (?:i|we|you|one)|"
                    r"how to|help me|i need to|we need to|need to|is there a way to|best way to)\s+(?P<clause>[^.;!?\n]+)",
                    re.I)
_TURN = re.compile(r"\s+(?:but|because|although|though|while|whereas|unless)\s+|,\s*(?:and|so|but)\s+", re.I)


def _trim(clause: str) -> str:
    clause = _TURN.split(clause, maxsplit=1)[0]
    return clause.strip(" ,:\"'“”‘’()")


def clauses(text: str, limit: int = 8) -> list[str]:
    """The intent clauses a text states, in order (at most ``limit``), without their markers."""
    out = []
    for m in _CLAUSE.finditer(text):
        c = _trim(m.group("clause"))
        if len(c) >= 3:
            out.append(c)
            if len(out) >= limit:
                break
    return out


def query_intent(query: str) -> str:
    """The intent a query states ("" when it states none)."""
    m = _QUERY.search(query)
    if not m:
        return ""
    c = _trim(m.group("clause"))
    return c if len(c) >= 3 else ""


__all__ = ["clauses", "query_intent"]
