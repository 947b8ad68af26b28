"""Code in a text: where it is, which language, and the tokens the code space indexes.

Detection (:func:`detect`): fenced blocks (```` ```lang ````, the tag naming the language), inline
backticks holding something code-like (a call, an identifier with ``_`` or an inner capital, an
operator), or a whole text whose lines read as code (keywords opening lines, lines ending in
``;``/``{``/``}``/``:``, calls and assignments) on at least 40% of its non-empty lines.

Language (:func:`language`): the fence tag, else the strongest of a few telling signs per language
(``def``/``self``/``elif`` for Python, ``=>``/``const``/``===`` for JavaScript, ``func``/``:=`` for Go,
``fn``/``let mut``/``::`` for Rust, ``SELECT``…``FROM`` for SQL, ...), else a file extension named in
the text (``main.py``). "" when none.

Tokens (:func:`tokens`): every identifier lower-cased, and, when it has parts, each part of its
camelCase / snake_case / kebab split (``getUserName`` gives ``getusername``, ``get``, ``user``,
``name``), parts reduced by a light suffix rule (``names`` and ``name`` meet); keywords of any of
the languages count a quarter (they say little about what the code does); common abbreviations are
folded to their word (``dir`` and ``directory``, ``msg`` and ``message``); structure tokens name what
is defined, called and imported (``def:parse``, ``call:open``, ``import:json``). The parts of a
defined name are also kept apart as name tokens (``name:user``), a lower-case compound split into
words programmers use and English words (``iterdir`` gives ``name:iter`` and ``name:directory``,
``yeardayscalendar`` ``name:calendar`` among others): what a function is
called says most about what it does. A natural-language query goes through the same splitting,
folding and suffix rule, without structure tokens, and adds each pair of adjacent words joined
(``file name`` also asks for ``filename``); each of its words also asks for a name token, and a few
verbs ask for the names code gives them ("return" for ``get``, "whether" for ``is``/``has``)
(:func:`query_tokens`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache, lru_cache

from teleo_server.analysis import ENGLISH_STOPWORDS
from teleo_server.extract.words import english_words

KEYWORD_WEIGHT = 0.25

_KEYWORDS = frozenset("""
and as assert async await break case catch class const continue def default del do elif else enum except export
extends false final finally fn for from func function go if impl implements import in interface is lambda let
match mod mut new nil none not null or package pass private protected pub public raise return self static struct
super switch this throw throws true try type typeof use var void while with yield int str bool float double char
long string print println include namespace using std auto unsigned sizeof goto defer chan select from where
insert into values update set delete create table begin end then fi esac echo local readonly
""".split())

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_INLINE = re.compile(r"`([^`\n]{2,200})`")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_CODE_LINE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import|return\b|if .*[:{]\s*$|for .*[:{]\s*$|while .*[:{]\s*$|elif |else\s*[:{]|"
    r"try\s*[:{]|except\b|function\b|const |let |var |fn |func |pub |public |private |static |#include|package |"
    r"using |@\w+|\}|\{|SELECT |INSERT |UPDATE |CREATE |\$ )|[;{}]\s*$|\w\([^)]*\)\s*[;:]?\s*$|^\s*[\w.\[\]]+\s*[+\-*/]?=\s*\S")
# a definition's header opening a text: what follows is its body, however the body's lines read
# (a list of strings, a long message)
_DEF_HEAD = re.compile(
    r"^\s*(?:@\w[\w.]*(?:\(.*\))?\s*\n\s*)*(?:(?:async\s+)?def\s+\w+\s*\(.*\)\s*(?:->.*)?:|class\s+\w+\s*(?:\(.*\))?\s*:"
    r"|(?:export\s+)?(?:async\s+)?function\*?\s+\w+\s*\(.*\)\s*\{|func\s+(?:\(\w+\s+\*?\w+\)\s*)?\w+\s*\(.*\{"
    r"|(?:pub\s+)?fn\s+\w+\s*(?:<.*>)?\s*\(.*\{)\s*$", re.M)
_CODE_LIKE = re.compile(r"\w\(|[A-Za-z]_[A-Za-z]|[a-z][A-Z]|::|->|=>|==|\.\w+\(|^[\w.]+\.[a-z]{1,4}$|^\$ |^--?\w")
_PROSE_IDENT = re.compile(r"(?<![\w.])(?:[a-z]+[A-Z][A-Za-z0-9]*|[a-z][a-z0-9]*_[a-z0-9_]+|[A-Za-z_]\w*\(\))(?![\w])")
_DEFINES = re.compile(r"\b(?:def|class|function|fn|func|struct|interface|trait|enum|type)\s+([A-Za-z_][A-Za-z0-9_]*)")
_CALLS = re.compile(r"(?<![\w.])(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_IMPORTS = re.compile(r"\b(?:import|from|require\(|use|#include\s*[<\"])\s*['\"]?([A-Za-z_][\w.:/]*)")

_SIGNS: dict[str, tuple[str, ...]] = {
    "python": (r"^\s*def \w+\(.*\)\s*(->.*)?:\s*$", r"\bself\b", r"^\s*elif\b", r"^\s*from [\w.]+ import\b",
               r"\bNone\b", r"__\w+__", r"^\s*import \w+\s*$", r":\s*$"),
    "javascript": (r"=>", r"\bconst \w+ =", r"===|!==", r"\bconsole\.log\(", r"\brequire\(", r"\bfunction\s*\w*\(",
                   r"\blet \w+ ="),
    "typescript": (r"\binterface \w+ \{", r":\s*(string|number|boolean)\b", r"\bexport (type|interface)\b"),
    "go": (r"\bfunc\s+(\(\w+ \*?\w+\)\s*)?\w+\(", r":=", r"^\s*package \w+", r"\bfmt\.\w+\(", r"\bchan\b"),
    "rust": (r"\bfn \w+\(", r"\blet mut\b", r"\bimpl\b", r"\w::\w", r"\bprintln!\(", r"\bpub fn\b", r"&mut\b"),
    "java": (r"\bpublic (static )?(class|void|int)\b", r"\bSystem\.out\.", r"\bprivate \w+ \w+;", r"@Override"),
    "c": (r"#include\s*<\w+\.h>", r"\bprintf\(", r"\bint main\(", r"\bmalloc\(", r"->\w+"),
    "cpp": (r"\bstd::", r"#include\s*<\w+>", r"\bcout\s*<<", r"\btemplate\s*<"),
    "sql": (r"\bSELECT\b[\s\S]+\bFROM\b", r"\bINSERT INTO\b", r"\bCREATE TABLE\b", r"\bWHERE\b", r"\bJOIN\b"),
    "shell": (r"^#!/bin/(ba)?sh", r"^\s*\$ \w", r"\bsudo\b", r"\|\s*grep\b", r"^\s*export \w+=", r"\becho\b"),
}
_SIGN_RE = {lang: [re.compile(p, re.M) for p in ps] for lang, ps in _SIGNS.items()}
_FENCE_TAGS = {"py": "python", "python3": "python", "js": "javascript", "jsx": "javascript", "node": "javascript",
               "ts": "typescript", "tsx": "typescript", "golang": "go", "rs": "rust", "c++": "cpp", "cc": "cpp",
               "cxx": "cpp", "h": "c", "sh": "shell", "bash": "shell", "zsh": "shell", "console": "shell",
               "postgres": "sql", "postgresql": "sql", "sqlite": "sql", "mysql": "sql"}
_EXTENSIONS = {"py": "python", "js": "javascript", "mjs": "javascript", "ts": "typescript", "go": "go", "rs": "rust",
               "java": "java", "c": "c", "h": "c", "cpp": "cpp", "cc": "cpp", "hpp": "cpp", "sql": "sql", "sh": "shell"}
_EXT_MENTION = re.compile(r"\b[\w-]+\.(py|js|mjs|ts|go|rs|java|cpp|cc|hpp|sql|sh)\b")
LANGUAGES = tuple(sorted(set(_SIGNS) | set(_EXTENSIONS.values())))


@dataclass(frozen=True, slots=True)
class CodeSpans:
    """The code of a text (``spans``, joined by newlines in ``code``) and its language ("" unknown)."""

    spans: tuple[str, ...]
    language: str

    @property
    def code(self) -> str:
        return "\n".join(self.spans)


def _codey_lines(text: str) -> float:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return 0.0
    return sum(bool(_CODE_LINE.search(ln)) for ln in lines) / len(lines)


def _looks_like_code(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 2:
        return _codey_lines(text) >= 0.4 or _DEF_HEAD.match(text) is not None
    line = lines[0] if lines else ""
    return bool(_CODE_LINE.search(line)) and len(_CODE_LIKE.findall(line)) >= 2


def language(code: str, tag: str = "", context: str = "") -> str:
    """The language of some code: its fence tag, else telling signs, else a file extension named."""
    tag = tag.lower()
    if tag:
        tag = _FENCE_TAGS.get(tag, tag)
        if tag in LANGUAGES:
            return tag
    scores = {lang: sum(bool(p.search(code)) for p in ps) for lang, ps in _SIGN_RE.items()}
    if scores.get("typescript") and scores.get("javascript"):
        scores["typescript"] += scores["javascript"]
    if scores.get("cpp") and scores.get("c"):
        scores["cpp"] += scores["c"]
    best = max(scores, key=lambda k: scores[k])
    if scores[best] >= 1:
        return best
    m = _EXT_MENTION.search(context or code)
    return _EXTENSIONS[m.group(1)] if m else ""


@lru_cache(maxsize=256)
def detect(text: str) -> CodeSpans | None:
    """The code a text holds, or None when it holds none. Remembered for the last 256 texts: a
    memory being stored is read by the catalog (its language) and the code space alike."""
    spans: list[str] = []
    tag = ""
    for m in _FENCE.finditer(text):
        if m.group(2).strip():
            spans.append(m.group(2))
            tag = tag or m.group(1)
    rest = _FENCE.sub(" ", text) if spans else text
    if not spans and _looks_like_code(text):
        return CodeSpans((text,), language(text, context=text))
    spans.extend(s for s in _INLINE.findall(rest) if _CODE_LIKE.search(s) or _IDENT.fullmatch(s) and "_" in s)
    if not spans:  # prose naming code: identifiers written as code writes them (getUserName, max_retries)
        spans = [w for w in _PROSE_IDENT.findall(rest)]
    if not spans:
        return None
    code = "\n".join(spans)
    return CodeSpans(tuple(spans), language(code, tag, text))


# Abbreviations programmers write, folded to the word (on both sides, so "dir" meets "directory")
_ABBREVIATIONS = {
    "dir": "directory", "dirs": "directory", "str": "string", "num": "number", "nums": "number", "len": "length",
    "idx": "index", "arg": "argument", "args": "argument", "kwargs": "argument", "fname": "filename",
    "msg": "message", "obj": "object", "val": "value", "vals": "value", "char": "character", "chars": "character",
    "buf": "buffer", "init": "initialize", "cfg": "configuration", "config": "configuration", "conf": "configuration",
    "param": "parameter", "params": "parameter", "attr": "attribute", "attrs": "attribute", "tmp": "temporary",
    "temp": "temporary", "src": "source", "dst": "destination", "dest": "destination", "pos": "position",
    "cur": "current", "curr": "current", "prev": "previous", "exc": "exception", "err": "error", "dict": "dictionary",
    "seq": "sequence", "ref": "reference", "func": "function", "fn": "function", "cnt": "count", "pkg": "package",
    "lib": "library", "env": "environment", "req": "request", "resp": "response", "addr": "address",
    "info": "information", "max": "maximum", "min": "minimum", "ctx": "context", "db": "database",
    "auth": "authentication", "fmt": "format", "repr": "representation", "sep": "separator", "ext": "extension",
    "hdr": "header", "hdrs": "header", "res": "result", "ret": "return", "cls": "class", "mod": "module",
    "lst": "list", "elem": "element", "elems": "element", "ns": "namespace", "dt": "datetime", "ts": "timestamp",
    "pwd": "password", "usr": "user", "proc": "process", "addrs": "address", "calc": "calculate", "gen": "generate",
}


# Words programmers join without a separator (``iterdir``, ``readlines``, ``getattr``): a lower-case
# compound is split into these and English words when they cover it whole
_NAME_WORDS = frozenset("""
get set is has can read write open close make dir file path name names line lines iter list dict str int bytes byte
text data key keys value values item items add remove del delete update find search match split join parse format
load dump dumps loads copy move link walk exists size time date day week month year header headers body message mail
mailbox to from new init send recv receive flush seek tell start end stop run call wait sleep lock unlock push pop
peek sort sorted index count sum max min abs all any next prev first last check test valid validate quote unquote
encode decode escape unescape compress decompress pack unpack user group host port addr address url uri query
fragment scheme net mask prefix suffix base root temp tmp node tree leaf child children parent attr attrs type types
class func args arg kw field fields record records log logger level handler filter stream buffer char chars word
words token tokens number num float double long short bool true false none null empty clear reset reload save store
fetch expand collapse normalize norm rel real splitext ext dirname basename common glob
""".split())
# What code calls what a docstring's verb says ("Return the size" is ``get_size``, "Test whether" is ``is_``)
_NAME_VERBS = {"return": ("get",), "test": ("is", "has"), "whether": ("is", "has"), "check": ("is",),
               "create": ("new", "make"), "iterate": ("iter",), "initialize": ("init",)}
NAME_PREFIX = "name:"
NAME_VERB_WEIGHT = 0.5  # code set dev, E7 alone: name tokens 0.427 -> 0.463, verbs 0.468, compounds 0.481,
# with English words in the compounds 0.485 -> 0.503


def _stem(part: str) -> str:
    if len(part) > 5 and part.endswith("ing"):
        return part[:-3]
    if len(part) > 4 and part.endswith("ed"):
        return part[:-2]
    if len(part) > 4 and part.endswith("ies"):
        return part[:-3] + "y"
    if len(part) > 3 and part.endswith("s") and not part.endswith("ss"):
        return part[:-1]
    return part


def split_identifier(ident: str) -> list[str]:
    """Lower-cased parts of an identifier (snake_case, kebab-case, camelCase, digits apart)."""
    parts: list[str] = []
    for piece in re.split(r"[_\-]+", ident):
        parts.extend(p.lower() for p in _CAMEL.findall(piece))
    return [p for p in parts if p]


def _word_terms(word: str, counts: Counter[str], weight: float) -> None:
    low = word.lower()
    parts = split_identifier(word)
    if low in _KEYWORDS:
        counts[low] += KEYWORD_WEIGHT * weight
        return
    if len(parts) > 1:
        counts[low] += weight
    for p in parts:
        if len(p) > 1 and not p.isdigit():
            p = _ABBREVIATIONS.get(p, p)
            counts[_stem(p)] += weight if p not in _KEYWORDS else KEYWORD_WEIGHT * weight


def _name_term(part: str) -> str:
    return NAME_PREFIX + _stem(_ABBREVIATIONS.get(part, part))


@cache
def _compound_vocabulary() -> frozenset[str]:
    """The words a compound is split into: ``_NAME_WORDS`` and the shipped English words (one set,
    made once, so each piece of a split is one lookup)."""
    return _NAME_WORDS | english_words()


def compound_words(part: str) -> list[str] | None:
    """A lower-case compound split into the fewest words that cover it whole (``iterdir`` -> ``iter``,
    ``dir``; ``yeardayscalendar`` -> ``year``, ``days``, ``calendar``), or None when it is a word
    itself or no split has two words or more. The words are those of ``_NAME_WORDS`` and English
    words of four letters or more (:func:`teleo_server.extract.words.english_words`)."""
    words = _compound_vocabulary()
    if part in words:
        return None
    n = len(part)
    best: list[list[str] | None] = [None] * (n + 1)
    best[0] = []
    for i in range(n):
        head = best[i]
        if head is None:
            continue
        for j in range(i + 2, n + 1):
            piece = part[i:j]
            if piece in words and (best[j] is None or len(best[j]) > len(head) + 1):  # type: ignore[arg-type]
                best[j] = head + [piece]
    found = best[n]
    return found if found is not None and len(found) > 1 else None


def _name_terms(name: str, counts: Counter[str]) -> None:
    """The name tokens of one defined name: the whole name, each part, each word of a compound part
    (which also counts as a code token, as a separated part does)."""
    counts[NAME_PREFIX + name.lower()] += 1.0
    for part in split_identifier(name):
        if len(part) < 2:
            continue
        counts[_name_term(part)] += 1.0
        for word in (compound_words(part) if len(part) >= 5 else None) or ():
            counts[_name_term(word)] += 1.0
            counts[_stem(_ABBREVIATIONS.get(word, word))] += 1.0


def tokens(code: str) -> Counter[str]:
    """Code tokens of a piece of code with their (fractional) frequencies."""
    counts: Counter[str] = Counter()
    for ident in _IDENT.findall(code):
        _word_terms(ident, counts, 1.0)
    for name in _DEFINES.findall(code):
        counts["def:" + name.lower()] += 1.0
        _name_terms(name, counts)
    defined = {n.lower() for n in _DEFINES.findall(code)}
    for name in _CALLS.findall(code):
        low = name.lower()
        if low not in _KEYWORDS and low not in defined:
            counts["call:" + low] += 1.0
    for mod in _IMPORTS.findall(code):
        counts["import:" + mod.split(".")[0].split("/")[0].split("::")[0].lower()] += 1.0
    return counts


def query_tokens(query: str) -> Counter[str]:
    """The code-space terms of a query: code tokens for a code query, split and reduced words for a
    natural-language one (English stop words left out)."""
    spans = detect(query)
    if spans is not None and (len(spans.code) >= 0.5 * len(query.strip()) or "\n" in spans.code):
        return tokens(spans.code)
    counts: Counter[str] = Counter()
    words = _IDENT.findall(query)
    for ident in words:
        low = ident.lower()
        for verb in _NAME_VERBS.get(low, ()):
            counts[_name_term(verb)] += NAME_VERB_WEIGHT
        if low in ENGLISH_STOPWORDS and low not in ("self",):
            continue
        _word_terms(ident, counts, 1.0)
        for part in split_identifier(ident):
            if len(part) > 1:
                counts[_name_term(part)] += 1.0
    # two words a name may write as one ("file name" -> filename), at half weight
    for a, b in zip(words, words[1:]):
        if a.isalpha() and b.isalpha() and a.lower() not in ENGLISH_STOPWORDS and b.lower() not in ENGLISH_STOPWORDS:
            joined = _stem((a + b).lower())
            counts[joined] += 0.5
            counts[NAME_PREFIX + joined] += 0.5
    return counts


__all__ = ["CodeSpans", "KEYWORD_WEIGHT", "LANGUAGES", "NAME_PREFIX", "NAME_VERB_WEIGHT", "compound_words", "detect",
           "language", "query_tokens", "split_identifier", "tokens"]
