"""Plain text tokenisation shared by the lexical spaces."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[a-z0-9]+")

# Only used to keep goal labels readable; BM25 itself keeps every token.
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her him his how i if in "
    "into is it its me my no not of on or our she so than that the their them then there these they this those "
    "to too up us was we were what when where which while who whom why will with would you your also about "
    "after all any because before between both each few more most other over same some such only own very just "
    "yes yeah oh ok really get got like know think one two".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric runs (no stemming)."""
    return _TOKEN.findall(text.lower())


__all__ = ["STOPWORDS", "tokenize"]
