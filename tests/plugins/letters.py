"""A toy embedding head and its space, added from outside the package in this one module.

The head ``letters`` is each chunk's letter frequencies (a-z), L2-normalised: computed from the
text, no model needed. The space ``E20_letters`` indexes it through the dense-head base. Loaded
by the server with ``TELEO_PLUGINS='["tests.plugins.letters"]'``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teleo_server.heads import Head, HeadKind, register_head
from teleo_server.spaces.dense_head import DenseHeadSpace
from teleo_server.spaces.registry import register

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def letter_vector(text: str) -> np.ndarray:
    counts = np.zeros(len(ALPHABET), np.float32)
    for ch in text.lower():
        i = ALPHABET.find(ch)
        if i >= 0:
            counts[i] += 1
    norm = float(np.linalg.norm(counts))
    return counts / norm if norm else counts


def encode(texts: Sequence[str], is_query: Sequence[bool]) -> list[np.ndarray]:
    return [letter_vector(t) for t in texts]


LETTERS = register_head(Head("letters", HeadKind.DENSE, len(ALPHABET), "float32",
                             "letter frequencies (a toy head)", encode=encode, version="1"))


@register
class LettersSpace(DenseHeadSpace):
    name = "E20_letters"
    head = "letters"
    description = "cosine of letter frequencies (a toy space)"
