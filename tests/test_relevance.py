"""Calibrated relevance: an absolute estimate that tells "nothing relevant" from "a good match",
where the relative score cannot (the best result of any retrieval scores near 1)."""

from __future__ import annotations

import math

import numpy as np
from teleo.v1 import memory_pb2 as pb

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel
from teleo_server.pipeline.relevance import models, relevance

NOTES = [
    "Water the tomato plants every morning before 9am; they wilt in the afternoon heat.",
    "The quarterly budget review moved to the second Thursday of the month.",
    "Dr. Okafor prescribed amoxicillin twice a day for ten days.",
    "The staging database password rotates every 30 days via the vault job.",
    "Mia's piano recital is on June 14 at the community hall.",
]


def _results(stub, auth, text, **kw):
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, top_k=5, filters=pb.RetrieveFilters(namespaces=["garden"]), **kw),
                                metadata=auth, timeout=60))
    return [e.result for e in events if e.WhichOneof("event") == "result"]


def test_a_nonsense_query_comes_out_low_and_a_good_match_high(api_server, stub):
    _, token = create_token(api_server.app.core.store, "calib", ["garden"], ["garden"], AccessLevel.INTERNAL, "garden")
    auth = [("authorization", f"Bearer {token}")]
    for note in NOTES:
        stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=note, namespace="garden")), metadata=auth, timeout=60)
    good = _results(stub, auth, "how often should I water the tomatoes?")
    nonsense = _results(stub, auth, "bicycles kayaks tea")
    assert good[0].memory.input.content.startswith("Water the tomato")
    # the relative score cannot tell them apart; the calibrated relevance can (it estimates how
    # often a result like this was judged relevant in the evaluation sets: a low base rate)
    assert good[0].score > 0.8 and nonsense[0].score > 0.8
    assert nonsense[0].relevance < 0.05 and good[0].relevance > 0.1, (good[0].relevance, nonsense[0].relevance)
    assert good[0].relevance > 10 * nonsense[0].relevance
    assert all(0.0 <= r.relevance <= 1.0 for r in good + nonsense)
    # a floor on it drops what is unlikely to be relevant, and keeps the good match
    floor = pb.StageOverrides(min_relevance=0.05)
    assert _results(stub, auth, "bicycles kayaks tea", overrides=floor) == []
    assert [r.memory.id for r in _results(stub, auth, "how often should I water the tomatoes?", overrides=floor)][:1] == \
        [good[0].memory.id]


def test_each_result_uses_the_first_model_whose_signals_it_has():
    (full, full_w, full_b), (dense, dense_w, dense_b), (lexical, lex_w, lex_b) = models()
    assert full == ("E1_semantic", "E12_late", "E6_lexical") and dense == ("E1_semantic",) and lexical == ("E6_lexical",)
    nan = float("nan")
    cols = {"E1_semantic": np.array([0.6, 0.6, nan, nan]), "E12_late": np.array([0.7, nan, nan, nan]),
            "E6_lexical": np.array([3.0, 3.0, 3.0, nan])}
    got = relevance(cols, 4)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert math.isclose(got[0], sig(full_w @ [0.6, 0.7, math.log1p(3.0)] + full_b), rel_tol=1e-5)
    assert math.isclose(got[1], sig(dense_w[0] * 0.6 + dense_b), rel_tol=1e-5)
    assert math.isclose(got[2], sig(lex_w[0] * math.log1p(3.0) + lex_b), rel_tol=1e-5)
    assert got[3] == 0.0  # no signal at all
