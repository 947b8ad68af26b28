"""E10 intent: BM25 over the intent clauses a memory states ("trying to cut the cloud bill", "in
order to reduce p99 latency", "the goal is to ship v2"), matched against the intent a query states
("how do I reduce latency?", "I want to lower costs"). A query that states no intent gets nothing
from this space; the ``fusion`` stage's ``space_boosts`` turn its score into a multiplicative boost
(``content *= 1 + boost * relative score``) rather than a vote of its own.

The seed embeds intent clauses with an intent model; none can be installed offline, so the clauses
are found by English markers and matched lexically.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from teleo_server.domain import Memory
from teleo_server.extract import intent
from teleo_server.spaces.base import QueryContext
from teleo_server.spaces.fielded import FieldSpace
from teleo_server.spaces.registry import register


@register
class IntentSpace(FieldSpace):
    name = "E10_intent"
    description = "stated intent clauses (trying to, in order to, the goal is), matched to the query's intent"

    def document_terms(self, memory: Memory) -> Mapping[str, float]:
        counts: Counter[str] = Counter()
        for clause in intent.clauses(memory.content):
            counts.update(self.content_words(clause))
        return counts

    def query_terms(self, ctx: QueryContext) -> Mapping[str, float] | None:
        stated = intent.query_intent(ctx.query.text)
        return Counter(self.content_words(stated)) if stated else None


__all__ = ["IntentSpace"]
