"""Text shared by the lexical spaces: the analyser (``teleo_server.analysis``) and the words left out
of goal labels."""

from __future__ import annotations

from teleo_server.analysis import ENGLISH_STOPWORDS, tokenize

# Only used to keep goal labels readable; BM25 itself keeps every token unless the analyser drops
# stop words.
STOPWORDS = ENGLISH_STOPWORDS | frozenset("also because before between both each few more most other over same some "
                                          "such only own very just one two know think".split())

__all__ = ["STOPWORDS", "tokenize"]
