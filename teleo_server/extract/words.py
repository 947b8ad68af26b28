"""English words of four letters or more, for splitting the lower-case compounds code names are
made of (``yeardayscalendar`` is ``year`` + ``days`` + ``calendar``).

The list (``english_words.txt``, one word a line) is the whole-word entries of the uncased
WordPiece vocabulary that MiniLM and SPLADE read text with (Apache-2.0), written by

    python -m teleo_server.extract.words triton_models/minilm/1/assets/tokenizer.json

It ships with the package: nothing is read from a model repository at run time, so the code space
tokenises alike whether the embedder runs in-process or in an external Triton server.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import cache
from pathlib import Path

WORDS_PATH = Path(__file__).with_name("english_words.txt")
MIN_LETTERS = 4  # shorter whole words split compounds into noise ("at" + "tribute"); the short ones code uses are listed in code._NAME_WORDS


@cache
def english_words() -> frozenset[str]:
    """The shipped word list (about 20,000 words; read once)."""
    return frozenset(WORDS_PATH.read_text(encoding="ascii").split())


def from_tokenizer(path: Path) -> list[str]:
    """The whole words of at least ``MIN_LETTERS`` letters a ``tokenizer.json``'s WordPiece vocabulary holds."""
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    return sorted(w for w in vocab if len(w) >= MIN_LETTERS and re.fullmatch(r"[a-z]+", w))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer", type=Path, help="a tokenizer.json with a WordPiece vocabulary")
    ap.add_argument("--out", type=Path, default=WORDS_PATH)
    args = ap.parse_args(argv)
    words = from_tokenizer(args.tokenizer)
    args.out.write_text("\n".join(words) + "\n", encoding="ascii")
    print(f"{len(words)} words -> {args.out}")  # noqa: T201
    return 0


__all__ = ["MIN_LETTERS", "WORDS_PATH", "english_words", "from_tokenizer", "main"]


if __name__ == "__main__":
    raise SystemExit(main())
