"""A new space is one class in one place: registered, it is indexed, fused and compared."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Hit, Overrides, Query
from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import register, unregister


class ImportanceSpace(Space):
    """Toy context space: a memory's importance."""

    name = "E99_importance"

    def __init__(self, settings: PipelineSettings, catalog: Any) -> None:
        super().__init__(settings, catalog)
        self.importance: list[float] = []

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        self.importance.append(memory.importance)

    def prepare(self, ctx: QueryContext) -> Any | None:
        return True

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.importance, dtype=np.float32)[rows]

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        imp = np.asarray(self.importance, dtype=np.float32)
        return (1.0 - np.abs(imp[rows] - imp[a])).astype(np.float32)


def test_registered_space_takes_part_in_fusion_and_compare():
    register(ImportanceSpace)
    try:
        r = make_retriever(PipelineSettings(), "numpy")
        for i in range(5):
            r.add(syn.memory(f"m{i}", "identical words", importance=i / 10), syn.embedding())
        q = Query(text="identical words", embedding=None, principal=syn.admin(), top_k=5)
        plain = [h.memory.id for h in r.retrieve(q) if isinstance(h, Hit)]
        assert plain == ["m0", "m1", "m2", "m3", "m4"]  # identical text: ties broken by row
        q.overrides = Overrides(space_weights=(("E99_importance", 5.0),))
        weighted = [h for h in r.retrieve(q) if isinstance(h, Hit)]
        assert [h.memory.id for h in weighted] == ["m4", "m3", "m2", "m1", "m0"]
        assert weighted[0].breakdown.spaces["E99_importance"] == np.float32(0.4)
        sims, _, _ = r.compare("m1", "m3", "max", {})
        assert abs(sims["E99_importance"] - 0.8) < 1e-6
    finally:
        unregister("E99_importance")
    assert "E99_importance" not in make_retriever(PipelineSettings(), "numpy").spaces


class LexicalEchoSpace(Space):
    """Toy space built on another: scores a memory by the lexical space's score, halved."""

    name = "E98_echo"

    def attach(self, spaces: dict[str, Space]) -> None:
        self.base = spaces["E6_lexical"]
        self.seen = sorted(spaces)

    def prepare(self, ctx: QueryContext) -> Any | None:
        return self.base.prepare(ctx)

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return self.base.score(ctx, feats, rows) / 2


def test_a_space_built_on_another_is_attached_to_every_space_once_all_are_built():
    register(LexicalEchoSpace)
    try:
        r = make_retriever(PipelineSettings(), "numpy")
        echo = r.spaces["E98_echo"]
        assert echo.seen == sorted(r.spaces) and echo.base is r.spaces["E6_lexical"]
        for i, text in enumerate(("harbour crane", "garden tomato", "harbour pilot")):
            r.add(syn.memory(f"m{i}", text), syn.embedding())
        q = Query(text="harbour", embedding=None, principal=syn.admin(), top_k=5, profile="single_space:E98_echo",
                  include_breakdown=True)
        hits = [h for h in r.retrieve(q) if isinstance(h, Hit)]
        lexical = Query(text="harbour", embedding=None, principal=syn.admin(), top_k=5, profile="single_space:E6_lexical",
                        include_breakdown=True)
        base = {h.memory.id: h.breakdown.spaces["E6_lexical"] for h in r.retrieve(lexical) if isinstance(h, Hit)}
        assert {h.memory.id: h.breakdown.spaces["E98_echo"] for h in hits} == {m: s / 2 for m, s in base.items()}
    finally:
        unregister("E98_echo")


def test_the_registry_answers_in_e_number_order_and_follows_registration():
    from teleo_server.spaces.registry import resolve_name, space_classes

    before = space_classes()
    assert list(before)[:3] == ["E1_semantic", "E2_recency", "E3_periodicity"]
    before.pop("E1_semantic")  # the caller's copy: the registry keeps it
    assert "E1_semantic" in space_classes()
    register(ImportanceSpace)
    try:
        assert list(space_classes())[-1] == "E99_importance" and resolve_name("importance") == "E99_importance"
    finally:
        unregister("E99_importance")
    assert "E99_importance" not in space_classes()
