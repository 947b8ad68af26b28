"""The code-retrieval set, generated from the standard library of the Python that runs it.

Natural language to code: for each documented function or method of the modules in ``MODULES``,
the first sentence of its docstring is the query and the function's source without its docstring
is the one relevant memory. Code to code: a function of ``posixpath`` is the query for the
function of the same name in ``ntpath`` and the other way round (two implementations of one
contract, written apart). Every function source is a memory.

Modules are split by a hash of their name: ``dev`` (tune here) and ``test`` (report); code-to-code
queries are in their own category of the test split. Deterministic for one Python version: the
set is made by this generator (``python -m bench.eval.code.generate --out DIR`` writes it as JSON
lines to look at) rather than committed, since it follows the interpreter's sources.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import sys
import sysconfig
from pathlib import Path

from bench.eval.datasets import Dataset, Doc, QueryItem

MODULES = ("argparse", "ast", "base64", "bisect", "calendar", "colorsys", "configparser", "copy", "csv",
           "dataclasses", "difflib", "email.utils", "fnmatch", "fractions", "ftplib", "functools", "genericpath",
           "gettext", "glob", "gzip", "heapq", "http.cookies", "imaplib", "inspect", "ipaddress", "json.decoder",
           "json.encoder", "locale", "logging", "mailbox", "mimetypes", "netrc", "ntpath", "optparse", "pathlib",
           "pickletools", "platform", "plistlib", "poplib", "posixpath", "pprint", "quopri", "random", "sched",
           "secrets", "shlex", "shutil", "smtplib", "socketserver", "statistics", "string", "tarfile", "tempfile",
           "textwrap", "tokenize", "traceback", "urllib.parse", "urllib.request", "uuid", "warnings", "wave",
           "weakref", "zipfile", "zipimport")
PAIRED = ("posixpath", "ntpath")
MIN_WORDS, MAX_LINES = 4, 80


def split_of(module: str) -> str:
    return "dev" if int(hashlib.sha1(module.encode()).hexdigest(), 16) % 2 == 0 else "test"


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return (m.group(1) if m else text).strip()


def _functions(module: str):
    # the source file in the standard library directory (frozen modules such as posixpath have no origin)
    path = Path(sysconfig.get_paths()["stdlib"]) / (module.replace(".", "/") + ".py")
    if not path.exists():
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return
        path = Path(spec.origin)
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node)
        body = node.body
        start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
        end = node.end_lineno or node.lineno
        if end - start > MAX_LINES:
            continue
        drop = set()
        if doc is not None and isinstance(body[0], ast.Expr):
            drop = set(range(body[0].lineno - 1, (body[0].end_lineno or body[0].lineno)))
        code = [ln for i, ln in enumerate(lines[start:end], start) if i not in drop]
        if len([ln for ln in code if ln.strip()]) < 3:
            continue
        indent = min(len(ln) - len(ln.lstrip()) for ln in code if ln.strip())
        yield node.name, doc, "\n".join(ln[indent:] for ln in code)


def build() -> Dataset:
    docs: list[Doc] = []
    queries: dict[str, list[QueryItem]] = {"dev": [], "test": []}
    seen_code: set[str] = set()
    by_name: dict[tuple[str, str], str] = {}
    for module in MODULES:
        split = split_of(module)
        for name, doc, code in _functions(module):
            if code in seen_code:
                continue
            seen_code.add(code)
            mid = f"{module}:{name}:{len(docs)}"
            docs.append(Doc(mid, code))
            if module in PAIRED:
                by_name.setdefault((module, name), mid)
            if doc:
                sentence = _first_sentence(doc)
                if len(sentence.split()) >= MIN_WORDS:
                    queries[split].append(QueryItem(f"q-{mid}", sentence, {mid: 1.0}, "nl_to_code"))
    text_of = {d.id: d.text for d in docs}
    a, b = PAIRED
    for (module, name), mid in sorted(by_name.items()):
        if module == a and (b, name) in by_name:
            other = by_name[(b, name)]
            queries["test"].append(QueryItem(f"c2c-{mid}", text_of[mid], {other: 1.0}, "code_to_code"))
            queries["test"].append(QueryItem(f"c2c-{other}", text_of[other], {mid: 1.0}, "code_to_code"))
    return Dataset("code", docs, queries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for memories.jsonl and queries.jsonl")
    args = ap.parse_args(argv)
    ds = build()
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "memories.jsonl", "w", encoding="utf-8") as f:
        for d in ds.docs:
            f.write(json.dumps({"id": d.id, "content": d.text}) + "\n")
    with open(args.out / "queries.jsonl", "w", encoding="utf-8") as f:
        for split, qs in ds.queries.items():
            for q in qs:
                f.write(json.dumps({"id": q.id, "split": split, "category": q.category, "text": q.text,
                                    "relevant": q.relevant}) + "\n")
    print(f"{len(ds.docs)} memories, " + ", ".join(f"{s}: {len(q)} queries" for s, q in ds.queries.items()))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
