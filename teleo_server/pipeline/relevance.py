"""Calibrated relevance: an absolute estimate, in [0, 1], that a result is relevant.

A result's ``score`` is relative (the best of a retrieval is always near the top of the scale), so it
cannot tell "nothing relevant" from "a perfect match". ``relevance`` can: a logistic model of
absolute signals, the dense cosine (E1), the late-interaction MaxSim (E12) and log(1 + BM25) (E6),
fitted offline on SciFact train and LoCoMo dev by ``bench/eval/calibrate.py`` (its reliability on
held-out SciFact test is in ``bench/results/calibration.json``). A result uses the first model whose
signals it has: all three; the dense cosine alone (no per-token query vectors); BM25 alone (no
embedding). ``min_relevance`` drops results below a floor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import numpy as np

MODELS_PATH = Path(__file__).with_name("relevance.json")
_LOG1P = {"E6_lexical"}  # signals whose scale grows with the text: their log enters the model


def signals(spaces: Mapping[str, float], names: tuple[str, ...]) -> list[float]:
    """The model inputs from a result's raw per-space scores (names must all be present)."""
    return [math.log1p(max(spaces[n], 0.0)) if n in _LOG1P else float(spaces[n]) for n in names]


@cache
def models() -> tuple[tuple[tuple[str, ...], np.ndarray, float], ...]:
    """(signals, weights, bias) of each model, in the order they are tried."""
    data = json.loads(MODELS_PATH.read_text())
    return tuple((tuple(m["signals"]), np.asarray(m["weights"], dtype=np.float64), float(m["bias"]))
                 for m in data["models"].values())


def relevance(columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """float32 (n,): the calibrated relevance of each candidate from its raw per-space scores
    (``columns[space]``, NaN where the space gave no signal); 0 where no model applies."""
    out = np.zeros(n, dtype=np.float32)
    done = np.zeros(n, dtype=bool)
    for names, weights, bias in models():
        if not all(name in columns for name in names):
            continue
        cols = [np.asarray(columns[name], dtype=np.float64) for name in names]
        usable = ~done & np.logical_and.reduce([~np.isnan(c) for c in cols])
        if not usable.any():
            continue
        x = np.stack([np.log1p(np.maximum(c[usable], 0.0)) if name in _LOG1P else c[usable]
                      for name, c in zip(names, cols)], axis=1)
        out[usable] = 1.0 / (1.0 + np.exp(-(x @ weights + bias)))
        done |= usable
    return out


__all__ = ["MODELS_PATH", "models", "relevance", "signals"]
