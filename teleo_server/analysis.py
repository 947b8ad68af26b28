"""The text analyser of every lexical space (BM25, character n-grams), of word-set similarity (MMR)
and of keyword extraction: one definition of what a "term" is, in every language.

- **Normalisation.** Unicode NFKC (full-width forms, ligatures and compatibility characters become
  their plain forms) and case folding; accents folded as an option (``café`` → ``cafe``, Arabic
  diacritics and hamza forms of alef removed), never inside Chinese, Japanese or Korean, where a
  mark changes the letter.
- **Segmentation.** Letter and digit runs. Chinese and Japanese (Han and kana), which are written
  without spaces, become overlapping character unigrams and bigrams. A Korean word is indexed whole
  and without its trailing particle (``서울에서는`` → ``서울에서는``, ``서울``); an Arabic word whole and
  without its article (``القاهرة`` → ``القاهره``, ``قاهره``).
- **Stop words and stems** (optional for the indexes, always for keywords). Stop words come from
  the ``stop-words`` package (Spanish, Portuguese, Arabic, Chinese, Korean, Japanese, and more) and
  a short list of English function words of our own (the packaged English list also drops content
  words such as "information"), less the content words the packaged lists carry (Spanish
  "tiempo", Arabic "زيارة", ...). Stemming uses the Snowball stemmer of the text's language.
- **Language.** By script (Hangul, kana, Han, Arabic, Cyrillic, Greek, ...), and for Latin text by
  which language's stop words it uses most.

``ANALYZER_VERSION`` (with the options, ``Analyzer.version``, logged as the index loads) names what
the analyser produces; the lexical indexes are built from the stored text at every start-up, so an
index never mixes terms of two versions.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.util import find_spec

ANALYZER_VERSION = "2"

_RUN = re.compile(r"[^\W_]+")
_ASCII_RUN = re.compile(r"[a-z0-9]+")

# Stop-word lists of the ``stop-words`` package by our language codes; English is ours (below).
_PACKAGED = {"es": "spanish", "pt": "portuguese", "ar": "arabic", "zh": "chinese", "ko": "korean", "ja": "japanese",
             "fr": "french", "de": "german", "it": "italian", "ru": "russian", "nl": "dutch"}
_SNOWBALL = {"en": "english", "es": "spanish", "pt": "portuguese", "ar": "arabic", "fr": "french", "de": "german",
             "it": "italian", "ru": "russian", "nl": "dutch", "el": "greek"}
LANGUAGES = ("en", "es", "pt", "ar", "zh", "ko", "ja", "fr", "de", "it", "ru", "nl")
ENGLISH_STOPWORDS = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each few for from further had has have having he her here "
    "hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of "
    "off on once only or other our ours ourselves out over own same she should so some such than that the their "
    "theirs them themselves then there these they this those through to too under until up very was we were what "
    "when where which while who whom why will with would you your yours yourself yourselves thing things yes yeah "
    "oh ok okay get got like really".split())
# Korean particles (josa), longest first, stripped from the end of a word that keeps a stem.
KOREAN_PARTICLES = tuple(sorted(
    "은 는 이 가 을 를 의 에 에서 에게 에게서 한테 한테서 께 께서 으로 로 으로서 로서 으로써 로써 와 과 랑 이랑 하고 도 만 "
    "까지 부터 마저 조차 보다 처럼 같이 이나 나 이든 든 이라도 라도 에서는 에는 에도 에서도 에게는 으로는 로는 와는 과는 이랑은 "
    "까지는 부터는 만은 보다는 처럼은 이란 란 이며 며 이고 고 이다 다 입니다 예요 이에요 네 네는 네의".split(), key=len, reverse=True))
# Alef forms and ta marbuta folded (ى is kept: it tells على "on" from the name علي), tatweel removed.
_ARABIC_FOLD = str.maketrans({"أ": "ا", "إ": "ا", "آ": "ا", "ٱ": "ا", "ة": "ه", "ـ": None})
# The definite article with the prepositions and conjunctions written onto it, longest first.
ARABIC_ARTICLES = ("وال", "بال", "كال", "فال", "لل", "ال")
# Content words that the packaged stop-word lists carry, kept as words (found on the multilingual set).
_NOT_STOPWORDS = {
    "es": {"mayor", "modo", "trabajo", "tiempo", "lugar", "nombre", "segunda", "loro", "casa", "parte", "hora", "horas"},
    "pt": {"nome", "trabalho", "tempo", "horas", "hora", "segunda", "lugar", "casa", "parte"},
    "ar": {"زيارة", "لقاء", "مايو", "باسم", "يوم", "اسم"},
    "ko": {"시간", "아이", "사람", "회의", "집", "이름"},
}
# Question words some lists lack.
_MORE_STOPWORDS = {"ar": {"متى", "ماذا", "لماذا", "كيف", "اين", "أين", "هل"}, "es": {"qué", "que", "cuándo", "dónde"},
                   "pt": {"quando", "onde", "quem"}}


def _script(ch: str) -> str:
    """A coarse script class of one (NFKC-normalised) character."""
    o = ord(ch)
    if o < 0x0250:
        return "latin"
    if 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
        return "hangul"
    if 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF:
        return "kana"
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3FFFF:
        return "han"
    if 0x0600 <= o <= 0x06FF or 0x0750 <= o <= 0x077F or 0x08A0 <= o <= 0x08FF:
        return "arabic"
    if 0x0400 <= o <= 0x04FF:
        return "cyrillic"
    if 0x0370 <= o <= 0x03FF:
        return "greek"
    return "other"


def _spaceless(script: str) -> bool:
    return script in ("han", "kana")


@cache
def stopwords(lang: str) -> frozenset[str]:
    """The stop words of a language (case-folded, accents kept), empty for one we have none for."""
    if lang == "en":
        return ENGLISH_STOPWORDS
    name = _PACKAGED.get(lang)
    if name is None:
        return frozenset()
    from stop_words import get_stop_words

    words = {unicodedata.normalize("NFKC", w).casefold() for w in get_stop_words(name, cache=False)} | _MORE_STOPWORDS.get(lang, set())
    return frozenset(words - _NOT_STOPWORDS.get(lang, set()))


@cache
def _folded_stopwords(lang: str) -> frozenset[str]:
    return frozenset(_fold(w) for w in stopwords(lang))


@cache
def _index_stopwords(lang: str) -> frozenset[str]:
    """What the indexes leave out of a text in ``lang`` when they drop stop words: its stop words,
    accent-folded and not."""
    return _folded_stopwords(lang) | stopwords(lang)


# Latin-script languages told apart by their stop words, in the order that settles a tie.
_LATIN_LANGUAGES = ("en", "es", "pt", "fr", "de", "it", "nl")


@cache
def _latin_index_stopwords() -> frozenset[str]:
    """The indexes' stop words of every Latin-script language together."""
    return frozenset().union(*(_index_stopwords(lang) for lang in _LATIN_LANGUAGES))


@cache
def _latin_stopword_languages() -> dict[str, tuple[int, ...]]:
    """Each stop word of the Latin-script languages with the languages (indices into
    ``_LATIN_LANGUAGES``) whose lists hold it: one lookup a word detects a language."""
    out: dict[str, list[int]] = {}
    for i, lang in enumerate(_LATIN_LANGUAGES):
        for w in stopwords(lang):
            out.setdefault(w, []).append(i)
    return {w: tuple(langs) for w, langs in out.items()}


@cache
def keyword_stopwords(lang: str) -> frozenset[str]:
    """What keyword extraction removes from a text in ``lang``: its stop words and English ones
    (queries mix in English), accent-folded and not. Other languages' lists are not applied: a
    Chinese function character is part of Japanese words, an Italian function word a Spanish noun."""
    return stopwords(lang) | _folded_stopwords(lang) | stopwords("en")


# A Snowball stemmer keeps state while it stems a word, so each thread has its own.
_THREAD = threading.local()
# PyStemmer, the C build of the Snowball stemmers, stems a word in about half a microsecond; the
# pure-Python stemmers of ``snowballstemmer`` (used without it) take about 39 µs
_COMPILED = find_spec("Stemmer") is not None


def _stemmer(lang: str):
    """This thread's stemmer for ``lang`` (None for a language without one)."""
    stemmers = getattr(_THREAD, "stemmers", None)
    if stemmers is None:
        stemmers = _THREAD.stemmers = {}
    if lang not in stemmers:
        name = _SNOWBALL.get(lang)
        if name is None:
            stemmers[lang] = None
        elif _COMPILED:
            import Stemmer

            stemmers[lang] = Stemmer.Stemmer(name, 0)  # 0: without PyStemmer's own word cache
        else:
            import snowballstemmer

            stemmers[lang] = snowballstemmer.stemmer(name)
    return stemmers[lang]


# The Snowball stem of a word. The pure-Python stemmers are slow enough to cache many words; the C
# ones only the most recent (a cache of every word an index had seen held 11 MB more over
# SciFact's 5,183 abstracts).
@lru_cache(maxsize=4096 if _COMPILED else 65536)
def _stem(lang: str, word: str) -> str:
    stemmer = _stemmer(lang)
    return stemmer.stemWord(word) if stemmer is not None else word


@lru_cache(maxsize=65536)
def _fold(word: str) -> str:
    """Accents and marks removed from a word of an alphabetic script (Latin, Greek, Cyrillic, Arabic)."""
    if word.isascii():
        return word
    word = word.translate(_ARABIC_FOLD)
    stripped = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", stripped)


def strip_article(word: str) -> str:
    """An Arabic word without its definite article (and what is written onto it), when three letters remain."""
    for a in ARABIC_ARTICLES:
        if word.startswith(a) and len(word) - len(a) >= 3:
            return word[len(a):]
    return word


def strip_particle(word: str) -> str:
    """A Korean word without its trailing particle, when a stem of at least one syllable remains."""
    for p in KOREAN_PARTICLES:
        if word.endswith(p) and len(word) > len(p):
            return word[: -len(p)]
    return word


def detect_language(text: str) -> str:
    """The text's language code: by script, and for Latin script by the stop words it uses most
    (English when it uses none)."""
    return _detect(text)[0] or "en"


def _detect(text: str) -> tuple[str | None, bool]:
    """(``detect_language``, whether it is sure). A text's script decides, except for Latin
    script, where the stop words it uses do, and a short text is often unsure: none at all (None:
    "reunion estacion malaga"), only one ("novidades do projeto jacaranda": "do" is English too),
    or as many of one language's as of another's ("O que Júlia costuma beber?": Spanish or
    Portuguese)."""
    head = text[:1000]
    scripts: dict[str, int] = {}
    if head.isascii():
        scripts["latin"] = 1
    else:
        for ch in head:
            if ch.isalpha():
                s = _script(ch)
                scripts[s] = scripts.get(s, 0) + 1
    if not scripts:
        return "en", True
    if scripts.get("hangul"):
        return "ko", True
    if scripts.get("kana"):
        return "ja", True
    top = max(scripts, key=scripts.get)
    if top == "han":
        return "zh", True
    if top in ("arabic", "cyrillic", "greek"):
        return {"arabic": "ar", "cyrillic": "ru", "greek": "el"}[top], True
    words = [w.casefold() for w in _RUN.findall(unicodedata.normalize("NFKC", head))][:150]
    langs_of, counts = _latin_stopword_languages(), [0] * len(_LATIN_LANGUAGES)
    for w in words:
        for i in langs_of.get(w, ()):
            counts[i] += 1
    best, hits = None, 0
    for lang, n in zip(_LATIN_LANGUAGES, counts):
        if n > hits:
            best, hits = lang, n
    return best, hits >= 2 and sorted(counts)[-2] < hits


@dataclass(frozen=True)
class Analyzer:
    """What the lexical spaces index and query. ``stem`` and ``drop_stopwords`` apply to the index
    terms (``terms``); keywords always drop stop words and never stem."""

    fold_accents: bool = True
    stem: bool = True
    drop_stopwords: bool = True
    ascii_only: bool = False  # Teleo's first analyser: lower-cased [a-z0-9] runs, nothing else (to compare)

    @property
    def version(self) -> str:
        if self.ascii_only:
            return "1"
        return f"{ANALYZER_VERSION}{'+fold' if self.fold_accents else ''}{'+stem' if self.stem else ''}" \
               f"{'+stop' if self.drop_stopwords else ''}"

    def _pieces(self, text: str) -> Iterable[tuple[str, str]]:
        """(token, script) of a text: words of alphabetic scripts, CJK unigrams and bigrams, Korean stems."""
        if text.isascii() or self.ascii_only:
            for w in _ASCII_RUN.findall(text.lower()):
                yield w, "latin"
            return
        norm = unicodedata.normalize("NFKC", text).casefold()
        for run in _RUN.findall(norm):
            if run.isascii():
                yield run, "latin"
                continue
            # split a run where it changes between space-less (Han, kana) and other scripts
            start, kinds = 0, [_script(c) for c in run]
            for i in range(1, len(run) + 1):
                if i == len(run) or _spaceless(kinds[i]) != _spaceless(kinds[start]):
                    yield from self._segment(run[start:i], kinds[start])
                    start = i

    def _segment(self, seg: str, script: str) -> Iterable[tuple[str, str]]:
        if _spaceless(script):
            for i, ch in enumerate(seg):
                yield ch, "cjk"
                if i + 1 < len(seg):
                    yield seg[i: i + 2], "cjk"
        elif script == "hangul":
            # without a dictionary a stripped ending may be part of a name (최유나 → 최유): the word
            # is kept whole as well, so either form matches
            yield seg, "hangul"
            stem = strip_particle(seg)
            if stem != seg:
                yield stem, "hangul+"
        elif script == "arabic":
            word = _fold(seg) if self.fold_accents else seg
            yield word, script
            bare = strip_article(word)
            if bare != word:
                yield bare, "arabic+"
        else:
            yield (_fold(seg) if self.fold_accents else seg), script

    @property
    def _plain(self) -> bool:
        """Whether index terms are the pieces as they are (no stop words left out, no stems)."""
        return self.ascii_only or not (self.stem or self.drop_stopwords)

    def terms(self, text: str, lang: str | None = None) -> list[str]:
        """The index terms of a text, in order, repeats kept (term frequencies count them)."""
        pieces = list(self._pieces(text))
        if self._plain:
            return [t for t, _ in pieces]
        return [term for term, _ in self._analysed(pieces, lang or detect_language(text))]

    def query_terms(self, text: str) -> list[str]:
        """A query's index terms, each once. A short query often uses too few stop words to tell
        its language by ("reunion estacion malaga"), and a stem depends on the language: then each
        word is stemmed as the likeliest language and as every other Latin-script language would
        stem it, and all the distinct stems are asked for, so memories match in whatever
        language they were stemmed (a short memory's own language may have been guessed wrong)."""
        lang, sure = _detect(text)
        if sure or not self.stem or self.ascii_only:
            return list(dict.fromkeys(self.terms(text, lang or "en")))
        pieces = list(self._pieces(text))
        if self.drop_stopwords:  # a stop word of any of them is left out
            pieces = [(t, script) for t, script in pieces if t not in _latin_index_stopwords()]
        out: dict[str, None] = {}
        for cand in dict.fromkeys(((lang,) if lang else ()) + _LATIN_LANGUAGES):
            out.update(dict.fromkeys(term for term, _ in self._analysed(pieces, cand)))
        return list(out)

    def surfaces(self, text: str, lang: str | None = None) -> dict[str, str]:
        """Each index term of a text with the word it was made from (at its first occurrence, case-
        and accent-folded as indexed), so a stem can be shown as a word ("studi" as "studies")."""
        pieces = list(self._pieces(text))
        if self._plain:
            return {t: t for t, _ in pieces}
        out: dict[str, str] = {}
        for term, word in self._analysed(pieces, lang or detect_language(text)):
            out.setdefault(term, word)
        return out

    def _analysed(self, pieces: list[tuple[str, str]], lang: str) -> Iterable[tuple[str, str]]:
        """(term, piece) for the pieces that are not stop words, each piece stemmed when asked."""
        stop = _index_stopwords(lang) if self.drop_stopwords else frozenset()
        stem = self.stem and _stemmer(lang) is not None
        for t, script in pieces:
            if t in stop:
                continue
            if stem and script not in ("cjk", "hangul", "hangul+") and not t.isdigit():
                yield _stem(lang, t), t
            else:
                yield t, t

    def words(self, text: str) -> set[str]:
        """The set of words of a text, for word-set similarity (Jaccard): its terms, except that
        Chinese and Japanese give the bigrams of their Han and katakana runs only, as keywords do,
        not every character and the kana of grammar, which any two texts share."""
        out = {t for t, script in self._pieces(text) if script != "cjk"}
        if not self.ascii_only:
            out.update(_cjk_run_pairs(unicodedata.normalize("NFKC", text).casefold(), frozenset()))
        return out

    def keywords(self, text: str) -> list[str]:
        """A query's keywords, as OpenClaw's keyword-only mode extracts them, each once, in order.

        Stop words of the text's language and English are left out, and numbers, and English words
        shorter than three characters (other languages' words shorter than two). Chinese and
        Japanese give the character bigrams of each run of Han or of katakana (hiragana, mostly
        particles and endings, separates them; a run of one character is its own keyword); Korean
        words give their stems without particles.
        """
        lang = detect_language(text)
        stop = keyword_stopwords(lang)
        shortest = 3 if lang == "en" else 2
        out: dict[str, None] = {}
        for t, script in self._keyword_pieces(text, stop):
            if t in stop or t.isdigit():
                continue
            if script in ("latin", "arabic", "cyrillic", "greek", "other") and len(t) < shortest:
                continue
            out.setdefault(t, None)
        return list(out)

    def _keyword_pieces(self, text: str, stop: frozenset[str]) -> Iterable[tuple[str, str]]:
        for t, script in self._pieces(text):
            if script in ("cjk", "arabic+"):
                continue  # CJK from the runs below; an Arabic word is its bare form, given here
            # a Korean word and its stem both: the stem may have cut a name
            yield (strip_article(t) if script == "arabic" else t), script
        for pair in _cjk_run_pairs(unicodedata.normalize("NFKC", text).casefold(), stop):
            yield pair, "cjk"


def _cjk_run_pairs(norm: str, stop: frozenset[str]) -> Iterable[str]:
    """The character bigrams of each run of Han or of katakana (a run of one character: itself),
    leaving out pairs with a character in ``stop`` (的, 吗, 有 ... are not words of their own)."""
    for run in _CJK_KEYWORD_RUN.findall(norm):
        if len(run) == 1:
            yield run
        for i in range(len(run) - 1):
            if run[i] not in stop and run[i + 1] not in stop:
                yield run[i: i + 2]


_CJK_KEYWORD_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]+|[\u30a0-\u30ff\u31f0-\u31ff]+")


DEFAULT = Analyzer()


def tokenize(text: str) -> list[str]:
    """The default analyser's index terms."""
    return DEFAULT.terms(text)


def extract_keywords(query: str) -> list[str]:
    """The default analyser's keywords of a query (see ``Analyzer.keywords``)."""
    return DEFAULT.keywords(query)


__all__ = [
    "ANALYZER_VERSION",
    "Analyzer",
    "DEFAULT",
    "ENGLISH_STOPWORDS",
    "KOREAN_PARTICLES",
    "LANGUAGES",
    "ARABIC_ARTICLES",
    "keyword_stopwords",
    "detect_language",
    "extract_keywords",
    "stopwords",
    "strip_article",
    "strip_particle",
    "tokenize",
]
