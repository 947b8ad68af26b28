"""E7 code: BM25 over the code tokens of the code a memory holds.

Code is found in fences, backticks, code-shaped prose identifiers or a text that reads as code
(:mod:`teleo_server.extract.code`). Its tokens split identifiers (``getUserName`` is also ``get``,
``user``, ``name``), weigh language keywords down to a quarter and add structure tokens
(``def:parse``, ``call:open``, ``import:json``) and name tokens for the parts of what is defined
(``iterdir`` is ``name:iter``, ``name:directory``). A code query (a snippet) is tokenised the same
way, structure included, so code finds code that defines and calls the same things; a question in
words is split and reduced to the same parts, so "get the user name" reaches ``getUserName``, and
each of its words also asks for a name token, so the function called what was asked ranks first.
Memories without code are not in this space. ``RetrieveFilters.languages`` keeps memories whose
code is in one of the named languages.

The seed uses a code embedding model; none can be installed offline, so this space is lexical over
code-aware tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from pydantic import Field

from teleo_server.domain import Memory
from teleo_server.extract import code
from teleo_server.spaces.base import QueryContext
from teleo_server.spaces.fielded import FieldSettings, FieldSpace
from teleo_server.spaces.registry import register


class CodeSettings(FieldSettings):
    b: float = Field(0.75, ge=0, le=1)  # code bodies vary in length more than prose (code set dev: 0.421 -> 0.427)


@register
class CodeSpace(FieldSpace):
    name = "E7_code"
    description = "code tokens (split identifiers, keywords weighed down, definitions, calls, imports)"
    Settings = CodeSettings

    def document_terms(self, memory: Memory) -> Mapping[str, float]:
        spans = code.detect(memory.content)
        return code.tokens(spans.code) if spans is not None else Counter()

    def query_terms(self, ctx: QueryContext) -> Mapping[str, float] | None:
        return code.query_tokens(ctx.query.text) or None


__all__ = ["CodeSettings", "CodeSpace"]
