"""Named entities of a memory's text, without a model: what links memories in the memory graph
(memories that share an entity) and what seeds personalised PageRank from a query.

An entity's ``key`` is what links: the same entity written differently gets the same key
(``José Müller``, ``Jose Muller`` and ``JOSÉ MÜLLER`` give ``jose muller``; ``Melanie's`` and
``Melanie`` give ``melanie``; ``250ms`` and ``250 ms`` give ``250 ms``), and common words get none.
``text`` is the surface form where the key was first seen (after NFKC, without a trimmed leading
article, honorific or possessive). ``extract`` gives each key once, in order of first appearance.

Kinds (a line is read as whitespace-separated chunks, less the punctuation around them):

- **identifier** (keys lower-cased, never split): URLs (key: host and path, without the scheme,
  ``www.``, query, fragment or trailing ``/``, so ``https://www.example.com/a/`` and
  ``example.com/a`` link); e-mail addresses; ``@handles``; ``#123`` issue numbers and hashtags
  (``PR #123`` gives the acronym ``pr`` and ``#123``: the number alone links ``PR #123``,
  ``pull request #123`` and ``#123``); paths (``src/main.py``, ``/etc/hosts``, ``~/.bashrc``);
  dotted names (``os.path.join``, ``api.example.com``, ``config.yaml``, ``Node.js``, ``10.0.0.1``);
  versions (``v2.3.1``); snake_case; camelCase and PascalCase with a capital after a lower-case
  letter (``getUserName``, ``PostgreSQL``, ``GitHub``, ``iPhone``: identifier wins over proper);
  ids mixing letters and digits (``eu-west-1``, ``INC-4821``, ``EC2``, ``GPT-4``, ``Q3``), not
  ordinals (``3rd``), clock times (``10am``) or decades (``1990s``); ``C++``, ``C#``.
- **quantity**: a number with a unit, attached or not (``250ms`` and ``250 ms`` both give
  ``250 ms``); units are canonicalised (``2 hours``/``2 hrs``/``2h`` give ``2 h``, ``5 days`` gives
  ``5 d``, ``3.5 GB`` gives ``3.5 gb``, ``40 percent`` gives ``40%``, ``30s`` is 30 seconds, ``3D``
  and ``5G`` are identifiers, ``4K`` and ``5M`` are ``4k`` and ``5m``); money with its symbol first
  (``$1,200`` and ``1,200$`` give ``$1200``; ``$5M`` gives ``$5m``); numbers lose thousands
  separators and trailing decimal zeros (``3.50`` gives ``3.5``, ``3,5`` gives ``3.5``); ISO dates
  (``2026-03-14``, ``2026/3/14``, ``2026-03-14T10:00Z`` give ``2026-03-14``). A bare number or year
  is no entity.
- **quoted**: 1 to 6 words, at most 60 characters, inside ``"…"``, ``“…”``, ``„…“``, ``«…»``,
  ``「…」``, ``『…』``, backticks, ``‘…’`` or ``'…'`` (the latter only where neither quote touches a
  letter on its outer side, so apostrophes never open one); trailing punctuation inside the quote is
  dropped, and a quote of one common word ("fine", "the") is none.
- **proper**: runs of capitalised words and acronyms (Latin, Greek and Cyrillic scripts), joined
  across the lower-case connectors ``of de del della di da dos das du des van von der den la le``
  (``Bank of America``, ``Ludwig van Beethoven``), a connector and ``the`` (``Lord of the Rings``)
  and ``&`` (``Johnson & Johnson``; ``AT&T`` is one word). ``and`` joins too, but a span with ``and`` gives its parts,
  and itself only when it is two capitalised words: ``Caroline and Melanie`` gives
  ``caroline and melanie``, ``caroline`` and ``melanie`` (a list of names is far more common than
  ``Procter and Gamble``, and a query about Caroline must find it); ``Bank of America and Wells
  Fargo`` gives ``bank of america`` and ``wells fargo``. A comma, a possessive, an opening or
  closing quote or bracket, sentence punctuation or any other word ends a span. Leading
  ``the``/``a``/``an``, honorifics (``Dr``, ``Mrs``) and month and weekday names are trimmed from
  a span's ends, and trailing capitalised function words (``Notes For The``). Keys are case-folded
  and accent-folded words joined by one space, possessive ``'s``/``’s`` stripped. A span is one
  key: ``Melanie Smith`` and a later ``Melanie`` do not link (no coreference).

Sentence starts (after ``. ! ? : …``, at a line start, after an opening quote, a bullet or a
list number; not after ``Dr.``, ``etc.`` or an initial such as ``J.``) are where capitals say
nothing: there a leading common English word is trimmed from a span (``Yesterday Caroline`` gives
``caroline``), a span that joins the first word across connectors gives what follows them as well
(``Price of the Nimbus Pro`` also gives ``nimbus pro``; ``Bank of America`` also ``america``), and
a span of one word is kept only if the same word is capitalised in the middle of a sentence
elsewhere in the text, or else if it is neither a stop word (English, with a list of common
sentence openers such as "Yesterday", "Also", "Thanks", "Upgraded", and the stop words of the
text's language when that is not English: ``Die``, ``Le``, ``El``) nor found in lower case
elsewhere in the text. Without a dictionary, other common words that open a sentence are kept
(``Latency was high`` gives ``latency``). A name before a colon at a line start (``Caroline: ...``) is a
speaker and kept, unless it is a label (``Note:``, ``User:``). ``I`` and its contractions, other
contractions (``Don't``, ``It's``), month and weekday names, single letters and chatty acronyms
(``OK``, ``PM``, ``FYI``) are never entities on their own; ``APIs`` gives ``api``.

German capitalises every noun: in a text whose stop words are mostly German, capitalised words are
not joined into spans (each is its own entity, ``Die Firma Siemens`` gives ``firma`` and
``siemens``). A text written entirely in capitals gives no proper entities, and an acronym next to
a capitalised function word (``DO NOT DEPLOY``) is shouting, not an acronym.

Chinese, Japanese and Korean have no letter case: their text gives no proper entities; names in
``「」``/``『』`` (or any other quotes) are quoted entities, and identifiers and quantities are
found as in any text. Text in lower case (a typed query) gives no proper entities either: match its
words against known keys with ``normalize_key``.

Cost: regular expressions are compiled at import, the stop-word lists built on the first call
(about 0.1 s). A line is split on whitespace and a chunk of lower-case letters (most of a text)
costs a few string tests; the language is worked out only when a rule needs it. A 200-character
sentence takes some tens of microseconds.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache

from teleo_server.analysis import _RUN, ENGLISH_STOPWORDS, LANGUAGES, _fold, stopwords

PROPER = "proper"
QUOTED = "quoted"
IDENTIFIER = "identifier"
QUANTITY = "quantity"


@dataclass(frozen=True, slots=True)
class Entity:
    key: str  # canonical form that links memories: folded, lower-case, single spaces
    text: str  # surface form as first seen
    kind: str  # "proper" | "quoted" | "identifier" | "quantity"


# ---------------------------------------------------------------------------------------------
# Word lists

# Common English words that open sentences or label lines, beyond the function words: a
# capitalised one at a sentence start says nothing about a name.
_EN_COMMON = frozenset("""
yesterday today tomorrow tonight visit also however maybe perhaps actually basically finally first firstly
second secondly third then next later now still just only even already usually sometimes often always
never recently currently previously lately eventually anyway anyways besides meanwhile otherwise
therefore thus hence instead overall luckily unfortunately fortunately apparently hopefully honestly
seriously definitely probably certainly clearly obviously sadly thankfully initially originally
ultimately generally typically normally personally suddenly soon once again afterwards afterward
earlier last every each most many several some all both neither either none nothing everything
everyone someone somebody anyone nobody everybody another other others much more less few whatever
hi hello hey dear thanks thank ok okay yes yeah yep yup no nope nah wow oh ah um uh hmm sure wait
well sorry please congrats congratulations bye goodbye cheers lol haha
note notes nb update updates summary todo question questions answer answers reminder remember
important warning error errors fix fixed done status action decision result results example
examples context background goal goals issue issues problem solution user users assistant system
human ai bot agent tip tips re subject from to cc date time step steps part edit edited ps tldr
meeting agenda
need needs needed make made use used using get got go went going gone try tried check checked run
ran add added remove removed move moved set meet deploy deployed let lets see saw look looks keep kept
call called ask asked tell told say said says think thought know knew want wanted like likes liked
love loves loved prefer prefers preferred plan plans planning planned start started finished
working worked bought visited met had took gave found felt seems seemed turns turned went came come
coming went watched watching read reading wrote writing made talked talking spent learned started
after before during since until while when where what which who why how if unless because though
although whether
upgrade upgraded update updated change changed switch switched migrate migrated forgot forget decide
decided agree agreed confirm confirmed create created release released launch launched ship shipped
merge merged install installed configure configured rename renamed replace replaced schedule scheduled
cancel cancelled canceled postpone postponed book booked order ordered pay paid send sent receive
received learn noticed realized discussed mentioned reported promised joined left stopped enabled
disabled bumped reverted dropped increased decreased raised lowered reduced extended renewed signed
correction clarification followup follow latest late new old current previous final quick
hopefully currently tomorrow's today's yesterday's
one two three four five six seven eight nine ten
""".split())

# Common English adjectives: a capitalised one alone at a sentence start is none ("Great!"), but it
# is not trimmed from a longer span ("Great Britain", "Good Morning America").
_EN_ADJECTIVES = frozenset("great good cool nice awesome fine right wrong true false happy glad welcome".split())

# Packaged English stop words that are content words or names: not dropped at a sentence start.
_EN_PACKAGED_KEEP = frozenset("""
microsoft netscape wells bill world computer research invention novel mug ring room rooms fire web
website webpage homepage page pages site index html htm http arpa uucp msie gov edu org com net null
member members man men state states group groups information system test text value area areas date
name number numbers order orders problem problems section line year years home case cases face faces
fact facts point points place places part parts side sides work works words terms keys caption copy
interest interests importance amount length width
""".split())

_MONTHS_DAYS = frozenset("""
january february march april may june july august september october november december
jan feb apr jun jul aug sept oct nov dec
monday tuesday wednesday thursday friday saturday sunday mon tue tues thu thur thurs fri
mondays tuesdays wednesdays thursdays fridays saturdays sundays weekend weekends
""".split())
_HONORIFICS = frozenset("mr mrs ms mx dr prof sir madam mme mlle herr frau sr sra srta".split())
_ARTICLES = frozenset(("the", "a", "an"))
# trimmed from either end of a span
_EDGE_DROP = _MONTHS_DAYS | _HONORIFICS | _ARTICLES
# capitalised function words trimmed from the end of a span ("Notes For The")
_TRAIL_DROP = frozenset("the a an of for to in on at by with from and or but is are was were be".split())
# abbreviations whose "." does not end a sentence
_ABBREVIATIONS = _HONORIFICS | frozenset("st jr sr vs etc approx eg ie inc ltd co corp dept est fig vol".split())
_CONNECTORS = frozenset("of de del della di da dos das du des van von der den la le and".split())
_CONN_WORDS = _CONNECTORS | {"the"}
# acronyms that are chat, not names
_ACRONYM_DROP = frozenset("""
ok okay am pm fyi asap tbd todo lol omg btw imo imho aka etc ps nb tldr rip thx pls plz wtf idk
brb afaik iirc ooo eod eow
""".split())
# capitalised function words that are acronyms when written in capitals ("the US", "IT team")
_SHOUT_EXEMPT = frozenset(("us", "it"))
_CONTRACTION_SUFFIXES = ("n't", "'re", "'ve", "'ll", "'d", "'m")
# French and Italian elisions written onto a name: l'Europe, d'Artagnan, dell'Italia
_ELISIONS = frozenset("l d j qu c s n m t dell dall nell sull all un".split())

# stop_words languages with letter case (the others cannot tell a name by its capital)
_CASED_LANGUAGES = {
    "bg": "bulgarian", "ca": "catalan", "cs": "czech", "da": "danish", "nl": "dutch", "fi": "finnish",
    "fr": "french", "de": "german", "hu": "hungarian", "id": "indonesian", "ms": "malaysian",
    "it": "italian", "nb": "norwegian", "pl": "polish", "pt": "portuguese", "ro": "romanian",
    "ru": "russian", "sk": "slovak", "es": "spanish", "sv": "swedish", "tr": "turkish",
    "uk": "ukrainian", "vi": "vietnamese", "el": "greek",
}


@cache
def _word_lists() -> tuple[frozenset[str], frozenset[str], tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(English words that open sentences, all English stop words, language codes, word -> indices
    of the languages it is a stop word of), built on the first call. A language's stop words are
    the words whose indices name it (no set of its own: 13,000 words in 25 sets took 0.5 MB more);
    the index tuples are shared (most words belong to one language)."""
    from stop_words import get_stop_words

    def norm(words) -> set[str]:
        out = set()
        for w in words:
            w = unicodedata.normalize("NFKC", w).replace("’", "'").casefold()
            out.add(w)
            out.add(_fold(w))
        return out

    en_initial = frozenset(norm(ENGLISH_STOPWORDS) | norm(_EN_COMMON))
    packaged = {w for w in norm(get_stop_words("english", cache=False)) if len(w) > 2 and w not in _EN_PACKAGED_KEEP}
    en_all = frozenset(en_initial | packaged | _EN_ADJECTIVES)
    codes, sets = ["en"], [en_all]
    for code, name in _CASED_LANGUAGES.items():
        # the analyser's lists where it has one (it corrects a few: Spanish "tiempo" is a word)
        words = stopwords(code) if code in LANGUAGES else get_stop_words(name, cache=False)
        codes.append(code)
        sets.append(frozenset(norm(words)))
    index: dict[str, list[int]] = {}
    for i, s in enumerate(sets):
        for w in s:
            index.setdefault(w, []).append(i)
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}
    return en_initial, en_all, tuple(codes), {w: shared.setdefault(tuple(v), tuple(v)) for w, v in index.items()}


# ---------------------------------------------------------------------------------------------
# Regular expressions

_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*")
_NUM = r"\d+(?:[.,]\d+)*"
_NUMBER = re.compile(_NUM)
_MONEY = re.compile(rf"([$€£¥₹])({_NUM})(k|m|bn|b|mm)?", re.I)
_MONEY_AFTER = re.compile(rf"({_NUM})([$€£¥₹])")
_ATTACHED = re.compile(rf"({_NUM})(?:[-–]({_NUM}))?(%|°[cfk]|[^\W\d_]+(?:/[^\W\d_]+)?)", re.I)
_DATE = re.compile(r"(\d{4})[-/](\d{1,2})[-/](\d{1,2})(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HANDLE = re.compile(r"[@#][^\W_][\w-]*")
_DOTTED = re.compile(r"[\w-]+(?:\.[\w-]+)+")
_HOST = re.compile(r"(?:[\w-]+\.)+[a-z]{2,12}", re.I)
_EXTENSION = re.compile(r"\.[a-z0-9]{1,10}$", re.I)
_ALNUM_ID = re.compile(r"[^\W_]+(?:[-:+#][^\W_]+)*")
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_SNAKE = re.compile(r"\w*[^\W\d_]\w*")
_PATH_CHARS = re.compile(r"[\w.@+~:/\\-]+")
_PATH_SEP = re.compile(r"[/\\]")
_TLDS = frozenset("com org net io dev ai app co edu gov info biz me tv xyz cloud site tech page so sh gg ly".split())
_NOT_ID = re.compile(r"\d+(?:st|nd|rd|th)|\d{1,2}(?::\d{2})?(?:am|pm)|\d+:\d{2}(?::\d{2})?|'?\d{2,4}s", re.I)
_LANG_SUFFIX = re.compile(r"[a-z](?:\+\+|#)", re.I)
_AMP_NAME = re.compile(r"[^\W\d_]+&[^\W\d_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_QUOTED = re.compile(
    r'"([^"\n]*)"'
    r"|“([^”\n]*)”"
    r"|„([^“”\n]*)[“”]"
    r"|«([^»\n]*)»"
    r"|「([^」\n]*)」"
    r"|『([^』\n]*)』"
    r"|`([^`\n]*)`"
    r"|‘([^’\n]*)’(?!\w)"
    r"|(?<!\w)'([^'\n]*)'(?!\w)"
)

_CURRENCIES = "$€£¥₹"
_INITIALS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]?")
_LEAD = "\"'“‘«「『„‚‹(<[{*•·‣◦▪–—-¿¡"
_TRAIL = ".,;:!?…)]}>\"'”’»」』›"
_OPEN_QUOTES = frozenset("\"'“‘«「『„‚‹")
_QUOTE_CHAR = re.compile("[\"“„«「『`‘']")
_BULLETS = frozenset("*•·‣◦▪–—-")
_SENTENCE_END = frozenset(".!?:…")
_QUOTE_STRIP = " \t.,;:!?…-–—"

_UNITS = {
    "%": "%", "percent": "%", "pct": "%",
    "ns": "ns", "nanosecond": "ns", "nanoseconds": "ns",
    "µs": "µs", "μs": "µs", "microsecond": "µs", "microseconds": "µs",
    "ms": "ms", "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
    "wk": "wk", "wks": "wk", "week": "wk", "weeks": "wk",
    "mo": "mo", "mos": "mo", "month": "mo", "months": "mo",
    "yr": "yr", "yrs": "yr", "year": "yr", "years": "yr",
    "b": "b", "byte": "b", "bytes": "b", "bit": "bit", "bits": "bit",
    "kb": "kb", "kib": "kib", "mb": "mb", "mib": "mib", "gb": "gb", "gib": "gib", "tb": "tb", "tib": "tib",
    "pb": "pb", "kbps": "kbps", "mbps": "mbps", "gbps": "gbps",
    "hz": "hz", "khz": "khz", "mhz": "mhz", "ghz": "ghz",
    "mm": "mm", "cm": "cm", "m": "m", "km": "km", "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "kilometer": "km", "kilometers": "km", "kilometre": "km", "kilometres": "km",
    "mi": "mi", "mile": "mi", "miles": "mi", "ft": "ft", "foot": "ft", "feet": "ft", "inch": "in", "inches": "in",
    "mg": "mg", "g": "g", "kg": "kg", "gram": "g", "grams": "g", "kilogram": "kg", "kilograms": "kg", "kilo": "kg",
    "kilos": "kg", "lb": "lb", "lbs": "lb", "oz": "oz", "ton": "t", "tons": "t", "tonne": "t", "tonnes": "t",
    "ml": "ml", "l": "l", "liter": "l", "liters": "l", "litre": "l", "litres": "l",
    "w": "w", "kw": "kw", "kwh": "kwh", "mah": "mah", "v": "v",
    "rps": "rps", "qps": "qps", "rpm": "rpm", "fps": "fps", "req/s": "req/s", "km/h": "km/h", "mph": "mph",
    "kph": "km/h", "°c": "°c", "°f": "°f",
    "x": "x", "k": "k",
    "usd": "usd", "eur": "eur", "gbp": "gbp", "jpy": "jpy", "chf": "chf", "cny": "cny", "inr": "inr",
    "dollars": "usd", "euros": "eur",
}
# units written without a space in the key
_TIGHT_UNITS = frozenset(("%", "x", "k"))
# single-letter units that are something else in capitals (3D, 5G): attached, only lower case counts
_CASE_UNITS = frozenset("s h d b m g l w v".split())
_MAGNITUDES = {"k": "k", "thousand": "k", "m": "m", "mm": "m", "million": "m", "b": "bn", "bn": "bn", "billion": "bn"}

# frequent German words ("die" is English too, but rare): a text with none of them is not German,
# and its language is not worked out to decide whether capitalised words join
_GERMAN_HINTS = frozenset("""
und der die das ist nicht ein eine einen mit dem den des auf für sich auch wird sind wir ich zu im vom
zum zur sie dass nach bei oder aber wurde werden hat haben über noch nur
""".split())
_MAGNITUDE_WORDS = frozenset(("thousand", "million", "billion", "bn", "k", "m"))
# units that are something else after a space ("10 x 20", "5 k")
_LOOSE_EXCLUDED = frozenset(("x", "k"))
# connectors that give a span's parts as well ("and") or join nothing further
_JOINERS = frozenset(("and", "&"))

# token classes
_OTHER, _CAP, _ACR, _CONN, _AMP, _SHOUT = range(6)


# ---------------------------------------------------------------------------------------------
# Keys

@lru_cache(maxsize=65536)
def _word_key(word: str) -> str:
    """A word's key: case-folded, accents folded (not inside CJK, where a mark is a letter)."""
    w = word.replace("’", "'").casefold()
    return w if w.isascii() or _CJK.search(w) else _fold(w)


def normalize_key(text: str) -> str:
    """The key of a surface form, as ``extract`` makes it for a proper or quoted entity: NFKC,
    case and accents folded, whitespace collapsed, outer punctuation, a possessive ``'s`` and a
    leading article dropped. Use it to look a query's words up among known keys."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    words = text.replace("’", "'").strip(_QUOTE_STRIP + "\"'“”‘«»「」『』`()[]").split()
    if not words:
        return ""
    if len(words) > 1 and words[0].casefold() in _ARTICLES:
        words = words[1:]
    last = words[-1]
    if last.endswith("'s") and len(last) > 2:
        words[-1] = last[:-2]
    return " ".join([_word_key(w) for w in words])


def _number(s: str) -> str:
    """A number without thousands separators or trailing decimal zeros (``1,200`` -> ``1200``,
    ``3,5`` and ``3.50`` -> ``3.5``)."""
    if "," in s:
        head, _, tail = s.rpartition(",")
        if "." not in s and len(tail) != 3 and head.isdigit():
            s = head + "." + tail  # a decimal comma
        elif "." in s and s.rfind(",") > s.rfind("."):
            s = s.replace(".", "").replace(",", ".")  # 1.200,50
        else:
            s = s.replace(",", "")
    if s.count(".") == 1:
        s = s.rstrip("0").rstrip(".")
    return s or "0"


def _quantity(core: str) -> str | None:
    """The key of a quantity written as one chunk (``250ms``, ``40%``, ``$1,200``), or None."""
    m = _MONEY.fullmatch(core)
    if m:
        mag = m.group(3)
        return m.group(1) + _number(m.group(2)) + (_MAGNITUDES[mag.lower()] if mag else "")
    m = _MONEY_AFTER.fullmatch(core)
    if m:
        return m.group(2) + _number(m.group(1))
    m = _ATTACHED.fullmatch(core)
    if m:
        raw = m.group(3)
        unit = raw.lower()
        if len(raw) == 1 and raw.isupper():
            if unit in ("k", "m", "b"):
                return _number(m.group(1)) + _MAGNITUDES[unit]
            return None  # 3D, 5G
        canon = _UNITS.get(unit)
        if canon is None or (unit in _CASE_UNITS and raw != unit):
            return None
        if raw == "s" and len(m.group(1)) == 4 and m.group(1).endswith("0"):
            return None  # the 1990s
        num = _number(m.group(1)) + ("-" + _number(m.group(2)) if m.group(2) else "")
        return num + canon if canon in _TIGHT_UNITS else f"{num} {canon}"
    return None


def _date(core: str) -> str | None:
    m = _DATE.fullmatch(core)
    if m and 1 <= int(m.group(2)) <= 12 and 1 <= int(m.group(3)) <= 31:
        return f"{m.group(1)}-{int(m.group(2)):02d}-{int(m.group(3)):02d}"
    return None


def _url_key(rest: str) -> str:
    """host/path of a URL without its scheme, lower-cased, without www., query, fragment or trailing /."""
    rest = rest.split("#", 1)[0].split("?", 1)[0].rstrip("/").lower()
    host, sep, path = rest.partition("/")
    host = host.rsplit("@", 1)[-1]
    if host.startswith("www."):
        host = host[4:]
    return host + sep + path if path else host


def _is_host(seg: str) -> bool:
    """Whether a path's first segment is a host name (example.com, docs.rs, api.eu.example.net)."""
    if not _HOST.fullmatch(seg):
        return False
    labels = seg.lower().split(".")
    return labels[0] == "www" or labels[-1] in _TLDS or len(labels) >= 3


def _identifier(core: str) -> str | None:
    """The key of an identifier written as one chunk, or None."""
    if "://" in core:
        scheme, _, rest = core.partition("://")
        return _url_key(rest) if scheme.isalpha() and rest else None
    if "@" in core:
        if _EMAIL.fullmatch(core):
            return core.lower()
        return core.lower() if core[0] == "@" and _HANDLE.fullmatch(core) else None
    if core[0] == "#":
        return core.lower() if _HANDLE.fullmatch(core) else None
    if "/" in core or "\\" in core:
        if not _PATH_CHARS.fullmatch(core) or not _HAS_LETTER.search(core):
            return None
        segs = _PATH_SEP.split(core)
        if _is_host(segs[0]):
            return _url_key(core)  # example.com/docs
        if core[0] in "/~." or _EXTENSION.search(segs[-1]) or len(segs) >= 3 and not all(
                s.lower() in ENGLISH_STOPWORDS for s in segs):
            return core.lower()
        return None  # and/or, TCP/IP, km/h
    if "." in core:
        if not _DOTTED.fullmatch(core):
            return None
        parts = core.split(".")
        if all(len(p) == 1 for p in parts):
            return None  # e.g, i.e (U.S is an acronym: see _Extractor.line)
        if all(p.isdigit() for p in parts) and len(parts) < 3:
            return None  # a number
        low = core.lower()
        return low[4:] if low.startswith("www.") else low
    if "_" in core:
        return core.lower() if _SNAKE.fullmatch(core) else None
    if _LANG_SUFFIX.fullmatch(core):
        return core.lower()  # C++, C#
    if _ALNUM_ID.fullmatch(core) and _HAS_DIGIT.search(core) and _HAS_LETTER.search(core) \
            and not _NOT_ID.fullmatch(core):
        return core.lower()
    return None


def _camel(word: str) -> bool:
    """A capital right after a lower-case letter (getUserName, iPhone, PostgreSQL)."""
    prev_lower = False
    for c in word:
        if c.isupper():
            if prev_lower:
                return True
            prev_lower = False
        else:
            prev_lower = c.islower()
    return False


# ---------------------------------------------------------------------------------------------
# Extraction

class _Extractor:
    """One text's extraction: candidates by position, and what the sentence-start rules ask of the
    whole text (is a word capitalised mid-sentence elsewhere, found in lower case, the language).

    A token of a line is a list [class, key, start, end, sentence, ends_span, colon, line_start,
    chunk]: ``sentence`` is 2 at a line start (or after a bullet), 1 at a sentence start, else 0;
    ``chunk`` the number of the line's whitespace-separated chunk it is in."""

    __slots__ = ("text", "cands", "seen", "mid_caps", "_langs", "_german", "no_caps", "lists", "shout")

    def __init__(self, text: str):
        self.text = text
        # (position, priority, key, surface, kind, pending): pending is the case-folded word of a
        # sentence-initial single word, decided once the whole text is read ("" for the others)
        self.cands: list[tuple[int, int, str, str, str, str]] = []
        self.seen: set[str] = set()
        self.mid_caps: set[str] = set()
        self._langs: tuple[bool, frozenset[int]] | None = None
        self._german: bool | None = None
        self.shout = False
        self.no_caps = text.isupper() and len(text.split()) > 3
        self.lists = _word_lists()

    def german(self) -> bool:
        """Whether the text's stop words are mostly German (worked out only for a text with a
        frequent German word in it)."""
        if self._german is None:
            self._german = not _GERMAN_HINTS.isdisjoint(self.text[:1000].lower().split()) and self.languages()[0]
        return self._german

    def languages(self) -> tuple[bool, frozenset[int]]:
        """(German rules?, the text's languages when that is not English, as indices into the
        word lists' language codes), from the stop words of every cased language its first 1,000
        characters use; English wins a tie."""
        if self._langs is None:
            _, _, codes, index = self.lists
            counts = [0] * len(codes)
            for w in _RUN.findall(self.text[:1000].casefold()):
                for i in index.get(w, ()):
                    counts[i] += 1
            top = max(counts)
            if top == 0 or counts[0] == top:
                self._langs = (False, frozenset())
            else:
                best = [i for i, n in enumerate(counts) if n == top]
                self._langs = (any(codes[i] == "de" for i in best), frozenset(best))
        return self._langs

    def add(self, pos: int, prio: int, key: str, text: str, kind: str, pending: str = "") -> None:
        self.cands.append((pos, prio, key, text, kind, pending))
        if not pending:
            self.seen.add(key)

    def line(self, line: str, base: int) -> None:
        """A line's entities. Its whitespace-separated chunks are numbered; a chunk of lower-case
        letters only (most of a text) costs next to nothing: spans join tokens of adjacent chunks."""
        if ('"' in line or "'" in line or "`" in line) if line.isascii() else _QUOTE_CHAR.search(line):
            self.quotes(line, base)
        words = line.split()
        toks: list[list] = []
        sent_k = line_k = 0  # the chunks where the current sentence and the line's text start
        pos = 0
        skip = -1
        for k, raw in enumerate(words):
            if k == skip:
                continue
            if raw.isalpha():
                if raw.islower():
                    # a connector matters only right after a capitalised word or a connector
                    if toks and toks[-1][8] == k - 1 and not toks[-1][5] and raw in _CONN_WORDS:
                        toks.append([_CONN, raw, -1, -1, k == sent_k, False, False, False, k])
                    continue
                pos = line.find(raw, pos)
                start = base + pos
                pos += len(raw)
                sent = 2 if k == line_k else k == sent_k
                if raw.istitle() and raw != "I":  # the common case of word(), inline
                    key = raw.lower() if raw.isascii() else _word_key(raw)
                    if not sent:
                        self.mid_caps.add(key)
                    toks.append([_CAP, key, start, start + len(raw), sent, False, False, sent == 2, k])
                else:
                    tok = self.word(raw, start, start + len(raw), sent, False, k)
                    if tok is not None:
                        toks.append(tok)
                continue
            stripped = raw.lstrip(_LEAD)
            core = stripped.rstrip(_TRAIL)
            lead_n = len(raw) - len(stripped)
            trail = stripped[len(core):]
            ends = bool(trail) and not _SENTENCE_END.isdisjoint(trail)
            if core.isalpha() and core.islower():  # a lower-case word with punctuation around it
                if toks and toks[-1][8] == k - 1 and not trail and not lead_n and core in _CONN_WORDS:
                    toks.append([_CONN, core, -1, -1, k == sent_k, False, False, False, k])
                if ends:
                    sent_k = k + 1
                continue
            if not core:
                if k == line_k and raw[0] in _BULLETS:
                    line_k = sent_k = k + 1  # a bullet: the line's text starts after it
                elif ends:
                    sent_k = k + 1
                continue
            pos = line.find(raw, pos)
            start = base + pos + lead_n
            pos += len(raw)
            end = start + len(core)
            sent = 2 if k == line_k else 1 if k == sent_k else 0
            if lead_n:
                if toks and toks[-1][8] == k - 1:
                    toks[-1][5] = True  # "(" or a quote ends a span
                if not _OPEN_QUOTES.isdisjoint(raw[:lead_n]):
                    sent = sent or 1
            if core == "&":
                toks.append([_AMP, "&", start, end, 0, bool(trail), False, False, k])
                continue
            if k == line_k and trail in (".", ")") and (core.isdigit() or len(core) == 1):
                line_k = sent_k = k + 1  # "1." or "a)": a numbered item; the line's text starts after it
                continue
            if core.isalpha() or _WORD.fullmatch(core):
                tok = self.word(core, start, end, sent, bool(trail), k)
                if tok is not None:
                    if trail == "." and (tok[1] in _ABBREVIATIONS or len(core) == 1 and k + 1 < len(words) and (
                            words[k + 1].strip(_LEAD + _TRAIL).casefold() not in self.lists[0])):
                        ends = tok[5] = False  # Dr. Smith, J. R. R. Tolkien (not Plan B. Then ...)
                    tok[6] = ":" in trail
                    toks.append(tok)
                if ends:
                    sent_k = k + 1
                continue
            if core[0].isdigit() or core[0] in _CURRENCIES:
                took = self.number(core, trail, words, k, start, line, base, pos)
                if took is not None:
                    if took:  # the next chunk was the unit
                        nxt = words[k + 1]
                        ends = not _SENTENCE_END.isdisjoint(nxt[len(nxt.rstrip(_TRAIL)):])
                        pos = took
                        skip = k + 1
                    if ends:
                        sent_k = k + 1 + bool(took)
                    continue
            if "." in core and _INITIALS.fullmatch(core):
                letters = core.replace(".", "")
                if letters.isupper():  # U.S. -> us
                    toks.append([_ACR, letters.lower(), start, end, sent, bool(trail), False, sent == 2, k])
                ends = False
            elif _AMP_NAME.fullmatch(core) and core[0].isupper():
                self.add(start, 1, core.casefold(), core, PROPER)  # AT&T
            else:
                key = _identifier(core)
                if key:
                    self.add(start, 1, key, core, IDENTIFIER)
            if ends:
                sent_k = k + 1
        if toks and not self.no_caps:
            self.spans(toks, base)

    def word(self, w: str, start: int, end: int, sent: int, brk: bool, k: int) -> list | None:
        """A word's token, or None for a word that is no entity."""
        if w.islower():
            return [_CONN, w, -1, -1, sent, brk, False, False, k] if w in _CONN_WORDS else None
        if "'" in w or "’" in w:
            w2 = w.replace("’", "'")
            low = w2.lower()
            if low.endswith(_CONTRACTION_SUFFIXES):
                return None  # I'm, Don't, We're
            head, _, tail = w2.partition("'")
            if low.endswith("'s") and w2.count("'") == 1:
                if head.lower() in ENGLISH_STOPWORDS:
                    return None  # It's, That's
                w = w[:len(head)]  # Melanie's: the possessive ends the span
                end = start + len(head)
                brk = True
            elif head.islower() and head in _ELISIONS and tail[:1].isupper():
                w = w[len(head) + 1:]  # l'Europe: the elided article starts a span
                start = end - len(w)
                sent = 0
                k += 0.5  # not adjacent to the chunk before, still to the one after
        if w.istitle():
            if w == "I":
                return None
            key = _word_key(w)
            if not sent:
                self.mid_caps.add(key)
            return [_CAP, key, start, end, sent, brk, False, sent == 2, k]
        if w.isupper():
            low = w.lower()
            if low in ENGLISH_STOPWORDS and low not in _SHOUT_EXEMPT:
                self.shout = True
                return [_SHOUT, low, start, end, sent, True, False, False, k]  # DO NOT
            return [_ACR, _word_key(w), start, end, sent, brk, False, sent == 2, k]
        if len(w) > 2 and w[-1] == "s" and w[:-1].isupper():
            return [_ACR, _word_key(w[:-1]), start, end, sent, brk, False, sent == 2, k]  # APIs -> api
        if _camel(w):
            self.add(start, 1, w.lower(), w, IDENTIFIER)  # getUserName, iPhone, PostgreSQL
            return None
        if w[0].isupper():  # Sci-fi, Coca-cola
            key = _word_key(w)
            if not sent:
                self.mid_caps.add(key)
            return [_CAP, key, start, end, sent, brk, False, sent == 2, k]
        return None

    def number(self, core: str, trail: str, words: list[str], k: int, start: int, line: str, base: int,
               pos: int) -> int | None:
        """A date or quantity starting with chunk k: None if there is none, 0 if it is that chunk,
        else it takes the next chunk (its unit) too, and this is the line position after it."""
        key = _date(core)
        if key:
            self.add(start, 1, key, key, QUANTITY)
            return 0
        nxt = unit = None
        if not trail and k + 1 < len(words):
            nxt = words[k + 1].rstrip(_TRAIL)
            unit = nxt.lower()
        money = _MONEY.fullmatch(core)
        if money and not money.group(3) and unit in _MAGNITUDE_WORDS:
            key = money.group(1) + _number(money.group(2)) + _MAGNITUDES[unit]  # $5 million
        else:
            key = _quantity(core)
            if key:
                self.add(start, 1, key, core, QUANTITY)
                return 0
            if nxt is None or not _NUMBER.fullmatch(core):
                return None
            canon = _UNITS.get(unit)
            if canon is not None and canon not in _LOOSE_EXCLUDED and not (len(nxt) == 1 and nxt.isupper()):
                key = _number(core) + canon if canon == "%" else f"{_number(core)} {canon}"  # 250 ms
            elif len(nxt) == 1 and nxt in _CURRENCIES:
                key = nxt + _number(core)  # 30 €
            else:
                return None
        npos = line.find(words[k + 1], pos)
        self.add(start, 1, key, self.text[start:base + npos + len(nxt)], QUANTITY)
        return npos + len(words[k + 1])

    def quotes(self, line: str, base: int) -> None:
        en_all = None
        for m in _QUOTED.finditer(line):
            content = m.group(m.lastindex).strip(_QUOTE_STRIP)
            if not 2 <= len(content) <= 60 or not 1 <= len(content.split()) <= 6:
                continue
            key = normalize_key(content)
            if not key or not any(c.isalnum() for c in key):
                continue
            if en_all is None:
                en_all = self.lists[1]
            if all(w in en_all or w in _MONTHS_DAYS for w in key.split()):
                continue  # "fine", "the"
            self.add(base + m.start(), 0, key, content, QUOTED)

    def spans(self, toks: list[list], base: int) -> None:
        """Joins a line's capitalised tokens of adjacent chunks into spans and emits them."""
        if self.shout:
            for j, t in enumerate(toks):
                if t[0] == _SHOUT:  # an acronym next to a capitalised function word is shouting
                    for n in (j - 1, j + 1):
                        if 0 <= n < len(toks) and toks[n][0] == _ACR and abs(toks[n][8] - t[8]) == 1:
                            toks[n][0] = _OTHER
        german = None
        span: list[list] = []
        conns: list[list] = []
        last = None
        for t in toks:
            cls = t[0]
            adjacent = last is not None and t[8] - last[8] <= 1 and not last[5]
            if cls == _CAP or cls == _ACR:
                if span:
                    joins = adjacent and not t[4]
                    if joins:
                        if german is None:
                            german = self.german()
                        joins = not german
                    if joins:
                        span.extend(conns)
                    else:
                        self.emit(span, base)
                        span = []
                    conns = []
                span.append(t)
                last = t
                continue
            if span and adjacent and (cls == _CONN or cls == _AMP) and not t[4]:
                w = t[1]
                if not conns:
                    ok = w != "the"  # "the" only after another connector: Lord of the Rings
                else:
                    ok = len(conns) == 1 and conns[0][1] not in _JOINERS and w not in _JOINERS
                if ok:
                    conns.append(t)
                    last = t
                    continue
            if span:
                self.emit(span, base)
            span, conns, last = [], [], None
        if span:
            self.emit(span, base)

    def emit(self, span: list[list], base: int) -> None:
        """A span's entity, trimmed at its ends. A span with "and" gives its parts, and itself only
        when it is two capitalised words (Procter and Gamble). A span that starts a sentence and
        joins its first word across connectors gives what follows the connectors too."""
        if len(span) == 1:
            self.single(span[0], 0)
            return
        en_initial = self.lists[0]
        speaker = span[0][7] and span[-1][6] and len(span) <= 3
        sent0 = span[0][4]
        lo, hi = 0, len(span)
        while lo < hi:
            t = span[lo]
            if t[0] == _CONN or t[0] == _AMP or t[1] in _EDGE_DROP or (
                    sent0 and not speaker and hi - lo > 1 and t[1] in en_initial):
                lo += 1
            else:
                break
        while hi > lo:
            t = span[hi - 1]
            if t[0] == _CONN or t[0] == _AMP or t[1] in _EDGE_DROP or hi - lo > 1 and t[1] in _TRAIL_DROP:
                hi -= 1
            else:
                break
        if lo >= hi:
            return
        if lo or hi < len(span):
            span = span[lo:hi]
        if len(span) > 1:
            words = [t[1] for t in span]
            if "and" not in words:
                self.add(span[0][2], 1, " ".join(words), self.text[span[0][2]:span[-1][3]], PROPER)
                if lo == 0 and sent0 and span[1][0] == _CONN:
                    # a sentence's first word says nothing by its capital: "Price of the Nimbus Pro"
                    # gives "nimbus pro" too (and "Bank of America" gives "america")
                    j = 2
                    while span[j][0] == _CONN:
                        j += 1
                    self.emit(span[j:], base)
                return
            if len(span) == 3 and span[0][0] == _CAP and span[2][0] == _CAP:
                self.add(span[0][2], 1, " ".join(words), self.text[span[0][2]:span[-1][3]], PROPER)
            part: list[list] = []
            for t in span + [None]:
                if t is None or t[1] == "and":
                    if part:
                        self.emit(part, base)
                    part = []
                else:
                    part.append(t)
            return
        self.single(span[0], lo)

    def single(self, t: list, trimmed: int) -> None:
        """A span of one token (``trimmed``: how many tokens were trimmed before it)."""
        key = t[1]
        cls = t[0]
        if cls == _CONN or cls == _AMP or len(key) < 2 or key in _EDGE_DROP or cls == _ACR and key in _ACRONYM_DROP:
            return
        surface = self.text[t[2]:t[3]]
        if cls == _ACR or trimmed or not t[4]:
            self.add(t[2], 1, key, surface, PROPER)
        elif t[7] and t[6]:  # a speaker: "Caroline: ..."
            if key not in _EN_COMMON and key not in _ARTICLES and key not in _EN_ADJECTIVES:
                self.add(t[2], 1, key, surface, PROPER)
        else:
            self.add(t[2], 1, key, surface, PROPER, pending=surface.casefold())

    def kept(self, key: str, word: str) -> bool:
        """Whether a sentence-initial single capitalised word is a name: capitalised mid-sentence
        elsewhere, or else no stop word of English or the text's language and not found in lower
        case elsewhere."""
        if key in self.mid_caps:
            return True
        _, en_all, _, index = self.lists
        if key in en_all or word in en_all:
            return False
        if key in index or word in index:  # a stop word of some language: of the text's?
            foreign = self.languages()[1]
            if not foreign.isdisjoint(index.get(key, ())) or not foreign.isdisjoint(index.get(word, ())):
                return False
        # a lower-case occurrence as a word of its own (the search is case-sensitive)
        text = self.text
        i = text.find(word)
        while i >= 0:
            j = i + len(word)
            if (i == 0 or not text[i - 1].isalnum()) and (j == len(text) or not text[j].isalnum()):
                return False
            i = text.find(word, i + 1)
        return True

    def result(self, limit: int) -> list[Entity]:
        cands = self.cands
        cands.sort()
        out: list[Entity] = []
        seen: set[str] = set()
        for _, _, key, text, kind, pending in cands:
            if key in seen or pending and not self.kept(key, pending):
                continue
            seen.add(key)
            out.append(_entity(key, text, kind))
            if len(out) >= limit:
                break
        return out


# Entities are immutable: the same one is shared (cheaper than a frozen dataclass's __init__). The
# most recent thousand are enough: with 8,192 the cache held 1.9 MB once a corpus had filled it
# (about 240 bytes an entry), for a hit rate of 42% over SciFact, where a miss costs about a microsecond.
_entity = lru_cache(maxsize=1024)(Entity)


def extract(text: str, limit: int = 64) -> list[Entity]:
    """Entities in order of first appearance, one per key, at most `limit`."""
    return list(_extracted(text, limit))


@lru_cache(maxsize=256)
def _extracted(text: str, limit: int) -> tuple[Entity, ...]:
    """``extract``, remembered for the last 256 texts: a memory being stored is read by the memory
    graph and the entity space alike."""
    if not text or limit <= 0:
        return ()
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    ex = _Extractor(text)
    base = 0
    for line in text.split("\n"):
        ex.line(line, base)
        base += len(line) + 1
        if len(ex.seen) >= limit:
            break
    return tuple(ex.result(limit))


def keys(text: str, limit: int = 64) -> list[str]:
    """[e.key for e in extract(text, limit)]"""
    return [e.key for e in extract(text, limit)]


__all__ = ["Entity", "extract", "keys", "normalize_key", "PROPER", "QUOTED", "IDENTIFIER", "QUANTITY"]
