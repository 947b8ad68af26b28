"""Writes the multilingual test set beside this file: ``memories.jsonl`` (id, lang, content) and
``queries.jsonl`` (id, lang, text, relevant memory ids, style: ``careful`` or ``casual``).

    python -m bench.eval.multilingual.build [--check]

Deterministic: each language draws from its own ``random.Random`` seeded with ``SEED`` and the
language code, so the files change only when the templates (``templates.py``) or this file do.
``--check`` writes nothing and fails when the committed files differ from what would be written.
"""

from __future__ import annotations

import argparse
import random
import string
from pathlib import Path
from typing import Any

from bench.eval.generated import jsonl, write_or_check
from bench.eval.multilingual.templates import LANGUAGES, TIMES, Family, Language

SEED = 20240611
INSTANCES = 5  # memories per family
HERE = Path(__file__).resolve().parent
MEMORIES = HERE / "memories.jsonl"
QUERIES = HERE / "queries.jsonl"

# Korean particle pairs: (after a final consonant, after a vowel); 으로/로 also takes 로 after ㄹ.
_JOSA = {"은": ("은", "는"), "는": ("은", "는"), "이": ("이", "가"), "가": ("이", "가"), "을": ("을", "를"),
         "를": ("을", "를"), "과": ("과", "와"), "와": ("과", "와"), "이랑": ("이랑", "랑"), "랑": ("이랑", "랑"),
         "으로": ("으로", "로"), "로": ("으로", "로")}
_RIEUL = 8  # index of ㄹ among the final consonants of a Hangul syllable


def josa(word: str, particle: str) -> str:
    """``word`` with the form of a Korean particle that fits its last syllable (김민준은, 최유나는)."""
    with_final, without = _JOSA[particle]
    last = ord(word[-1]) - 0xAC00
    final = last % 28 if 0 <= last < 11172 else 0
    if with_final == "으로" and final == _RIEUL:
        return word + without
    return word + (with_final if final else without)


class _Filler(string.Formatter):
    """``str.format`` whose format spec, when it is a Korean particle, attaches that particle."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec in _JOSA:
            return josa(str(value), format_spec)
        return super().format_field(value, format_spec)


_FILL = _Filler()


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in _FILL.parse(template) if name}


def _dates(lang: Language, rng: random.Random) -> tuple[dict[str, str], ...]:
    """Twelve (departure, return three days later) date pairs in the language's own format."""
    days = rng.sample([(m, d) for m in range(1, 13) for d in range(1, 25)], 12)
    return tuple({"date": lang.date(m, d), "date2": lang.date(m, d + 3)} for m, d in days)


def _instances(fam: Family, pools: dict[str, Any], drawn: dict[str, list[dict[str, dict[str, str]]]],
               rng: random.Random) -> list[dict[str, dict[str, str]]]:
    """The family's ``INSTANCES`` draws: per instance, pool name -> the fields its entry fills.
    Every pool's entries are drawn without replacement, so a value names one memory of the family."""
    out: list[dict[str, dict[str, str]]] = [{} for _ in range(INSTANCES)]
    for pool in fam.draws:
        if pool in fam.shared:
            for i in range(INSTANCES):
                out[i][pool] = drawn[fam.same_as][i][pool]
            continue
        for i, entry in enumerate(rng.sample(list(pools[pool]), INSTANCES)):
            out[i][pool] = dict(entry) if isinstance(entry, dict) else {pool: entry}
    return out


def _render(template: str, values: dict[str, dict[str, str]], lang: Language) -> tuple[str, str]:
    """(text, style) of a template filled with one instance's values."""
    flat = {k: v for fields in values.values() for k, v in fields.items()}
    casual = template.startswith("~")
    body = template[1:] if casual else template
    missing = _fields(body) - flat.keys()
    if missing:
        raise ValueError(f"{lang.code}: template {template!r} names fields no pool drew: {sorted(missing)}")
    text = _FILL.format(body, **flat)
    return (lang.casual(text), "casual") if casual else (text, "careful")


def generate(lang: Language) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One language's memories and queries."""
    rng = random.Random(f"{SEED}:{lang.code}")
    pools = {**lang.pools, "time": TIMES, "dates": _dates(lang, rng)}
    drawn: dict[str, list[dict[str, dict[str, str]]]] = {}
    texts: list[tuple[str, int, str]] = []  # (family, instance, content)
    for fam in lang.families:
        drawn[fam.name] = _instances(fam, pools, drawn, rng)
        for i, values in enumerate(drawn[fam.name]):
            texts.append((fam.name, i, _render(fam.memories[i % len(fam.memories)], values, lang)[0]))
    rng.shuffle(texts)  # ids say nothing of the family
    ids = {(fam, i): f"{lang.code}-m{n:03d}" for n, (fam, i, _) in enumerate(texts)}
    memories = [{"id": ids[(fam, i)], "lang": lang.code, "content": text} for fam, i, text in texts]

    asks: list[tuple[str, str, list[str]]] = []
    for fam in lang.families:
        for i, template in enumerate(fam.queries):
            if not _fields(template.lstrip("~")):
                raise ValueError(f"{lang.code}: query template {template!r} shares no value with its memory")
            asks.append((*_render(template, drawn[fam.name][i], lang), [ids[(fam.name, i)]]))
    pair = next(f for f in lang.families if f.same_as)
    for j, template in enumerate(lang.joint):
        i = INSTANCES - 1 - j  # instances the families' own queries leave alone
        asks.append((*_render(template, drawn[pair.name][i], lang), [ids[(pair.same_as, i)], ids[(pair.name, i)]]))
    queries = [{"id": f"{lang.code}-q{n:03d}", "lang": lang.code, "text": text, "relevant": sorted(rel), "style": style}
               for n, (text, style, rel) in enumerate(asks)]
    return memories, queries


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every language's memories and queries, in the order of ``LANGUAGES``."""
    memories: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    for lang in LANGUAGES:
        m, q = generate(lang)
        memories += m
        queries += q
    return memories, queries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    memories, queries = build()
    files = {MEMORIES: jsonl(memories), QUERIES: jsonl(queries)}
    if args.check:
        return write_or_check(files, True, "python -m bench.eval.multilingual.build")
    write_or_check(files, False, "python -m bench.eval.multilingual.build")
    counts = {lang.code: (sum(m["lang"] == lang.code for m in memories), sum(q["lang"] == lang.code for q in queries))
              for lang in LANGUAGES}
    print(f"{len(memories)} memories, {len(queries)} queries: "  # noqa: T201 - the command's report
          + ", ".join(f"{code} {m}/{q}" for code, (m, q) in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
