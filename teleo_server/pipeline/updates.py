"""Update hints: which earlier memories a memory being stored probably updates.

Agents write changes as notes ("We moved staging to us-east-2 in March.") and seldom say which
earlier memory the note replaces ("The staging cluster runs in eu-west-1."). Without a
``supersedes`` link the server cannot be sure the older memory is stale, and its sentence vectors
cannot tell a changed fact from another fact about the same thing (the staging note's cosine to
the region fact is 0.55, to "The staging cluster has 12 nodes." 0.41, to "Staging deploys go out
every Tuesday." 0.53). So the server does not decide; it names the candidates and the agent, which
reads them, decides and links (``supersedes``) the ones that are replaced.

A memory's hints are the earlier memories (event time before its own) of its own namespace that
the writer may read, that nothing visible supersedes already and that it does not link to yet,
ranked by the cosine of their sentence vectors, above a floor:

* ``update_hint_change_similarity`` when the new memory reads as a change note: a change verb
  or phrase ("moved", "switched", "upgraded", "shipped", "no longer", "from now on", "instead
  of", "(was ...)", "(not ...)", "wrong", "now"), in English and in a few other languages
  (``CHANGE_WORDS``, ``CHANGE_PHRASES``);
* ``update_hint_restated_similarity`` otherwise: the same fact said again with another value
  ("Dana works from Lisbon." after "Dana works from Berlin.").

An earlier memory that names a sibling of what the new one names ("Kite Team" for a note about
"Kite Pro": names sharing a word, neither holding the other) states another fact and is no hint,
as in the implied updates of the conflict stage. Nothing is linked, hidden or reordered by a hint. The floors were chosen on the even-numbered
scenarios of the knowledge-update set (``bench/eval/knowledge_update``); the README gives what they
find there and on the odd ones.
"""

from __future__ import annotations

import re

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet, Principal
from teleo_server.pipeline.conflicts import Links, name_siblings, names_of
from teleo_server.pipeline.state import State
from teleo_server.pipeline.types import Query, UpdateHint
from teleo_server.query import Filters

# candidates fetched for each hint wanted, before the earlier ones are kept
OVERFETCH = 8
# a hint carries at most this many characters of the earlier memory's text (a Get has it all)
HINT_CHARS = 500

# words and phrases that mark a note about a change, in English, German, French, Spanish,
# Portuguese, Italian and Dutch (lower case; a word is matched whole, a phrase on word boundaries)
CHANGE_WORDS = frozenset("""
    now anymore instead replaced replaces replacing move moved moves migrated switched switches change
    changed changes upgraded downgraded ported renamed repriced raised lowered increased decreased reduced
    bumped resized rotated reassigned relocated transferred promoted shifted handover left joined new newly
    update updated correction corrected formerly previously wrong mistaken actually rescheduled postponed delayed
    shipped released scaled finished
    jetzt nun stattdessen gewechselt geändert umgezogen maintenant désormais remplacé changé déménagé ahora
    cambiado cambiada reemplazado reemplazada agora substituído substituída mudou adesso ora cambiato
    cambiata sostituito sostituita nu veranderd vervangen
""".split())
CHANGE_PHRASES = ("no longer", "not any more", "from now on", "instead of", "cut over", "took over", "takes over",
                  "handed over", "stepped back", "stepped down", "moved on", "used to", "nicht mehr", "ya no",
                  "en lugar de", "não mais", "non più", "invece di", "niet meer", "in plaats van", "(was ", "(were ",
                  "(not ", "as noted before", "earlier note")
_WORD = re.compile(r"\w+")


def reads_as_change(text: str) -> bool:
    """Whether ``text`` is written as a note about a change: one of ``CHANGE_WORDS`` as a word, or
    one of ``CHANGE_PHRASES`` ("moved", "no longer", "(was 30 s)", "désormais", ...)."""
    low = text.lower()
    words = _WORD.findall(low)
    if not CHANGE_WORDS.isdisjoint(words):
        return True
    padded = f" {' '.join(words)} "
    return any((f" {p} " in padded) if p[0] != "(" else (p in low) for p in CHANGE_PHRASES)


def update_hints(make_state, spaces: dict, dense_role: str | None, row: int, principal: Principal,
                 limit: int, change_floor: float, restated_floor: float) -> list[UpdateHint]:
    """Hints for the memory at ``row`` (see the module doc), at most ``limit``.

    make_state(query) -> State: the retriever's query state for a caller (ACL and filters as
    masks), through which the dense search runs, pushed down like any retrieval's."""
    space = spaces.get(dense_role) if dense_role is not None else None
    if limit <= 0 or space is None or getattr(space, "index", None) is None:
        return []
    cat = space.catalog
    memory = cat.memory(row)
    floor = change_floor if reads_as_change(memory.content) else restated_floor
    vector = space.memory_vectors(np.array([row], dtype=np.int64))[0]
    if not np.any(vector):
        return []
    query = Query(text="", embedding=EmbeddingSet(memory.model_version, [ChunkEmbedding({space.head: vector})]),
                  principal=principal, top_k=limit, filters=Filters(namespaces=(memory.namespace,)))
    state: State = make_state(query)
    feats = state.feature(dense_role)
    if feats is None:
        return []
    # the first pass at the space's calibrated (Matryoshka) dimension, as a retrieval's; rescored in
    # full. Earlier memories are kept after the search, not by a filter: a namespace's memories are
    # nearly all older than the one just stored, and an unfiltered search stays on the fast path
    dim = space.dimension(None) if hasattr(space, "dimension") else None
    rows, _ = space.search(state.ctx, feats, OVERFETCH * limit, dim=dim)
    rows = np.asarray(rows, np.int64)
    rows = rows[cat.event_time[rows] < cat.event_time[row]]
    scores = space.score(state.ctx, feats, rows)  # exact (a search may rank on a truncated vector)
    order = np.argsort(-np.nan_to_num(scores, nan=-2.0), kind="stable")
    rows, scores = rows[order], scores[order]
    linked = {lk.target_id for lk in memory.links}
    links = Links(state)
    names = names_of(memory.content)
    out: list[UpdateHint] = []
    for r, s in zip(rows.tolist(), np.asarray(scores, np.float64).tolist()):
        if r == row or not s >= floor:
            continue
        other = cat.memory(r)
        if other.id in linked or links.superseders(other.id):
            continue
        if names and name_siblings(names, names_of(other.content)):
            continue  # "Kite Team" after "Kite Pro": another member of the family, not an update
        text = other.content
        if len(text) > HINT_CHARS:
            text = text[: HINT_CHARS - 1] + "…"
        out.append(UpdateHint(other.id, round(float(s), 4), text))
        if len(out) == limit:
            break
    return out


__all__ = ["CHANGE_PHRASES", "CHANGE_WORDS", "HINT_CHARS", "OVERFETCH", "reads_as_change", "update_hints"]
