"""Tuning the memory graph (E8_graph) on LoCoMo dev: the ``teleological_graph`` profile and ``hipporag``.

Coordinate descent over settings, for each of the two families:

1. every knob moved alone from the family's defaults (one full LoCoMo dev pass each);
2. the best value of every knob that helped, combined, and that combination with each of those
   knobs put back (which parts of the combination carry the gain);
3. every knob moved alone again, from the best combination so far.

Selection objective J = (Recall@10 over all questions + Recall@10 over multi-hop questions) / 2;
the report also names, per family, the best variant whose overall Recall@10 is not below the
``teleological`` profile's (the issue's constraint). Then hipporag's relevance floor
(``validation_min_relevance``): what it filters from the top 10 and from every delivered result,
and its Recall@10, for the default and the tuned hipporag.

Space settings of E8_graph are index-time (``PipelineSettings.spaces["E8_graph"]``): a variant that
changes how the graph is built (``session_weight``, ``link_weight``, ``max_entities``) gets its own
index; the walk's settings (``alpha``, ``hops``, ``hub_fraction``, ``max_nodes``) only parameterise
the PageRank at query time, so they are set on a built index (``GraphSpace.config`` and its
``WalkSettings``; ``--check-walk-swap`` verifies that this ranks exactly as a rebuilt index).
Strategy time limits are switched off for hipporag here: under a 2-core machine's load a strategy
past its limit would be dropped and its breaker opened, and quality would depend on timing.

Only LoCoMo dev (and, for a final check, a sample of SciFact train) is read; never SciFact test.

    python -m bench.eval.tune_graph --data ../shared/data [--workers 2] [--quick]
"""

from __future__ import annotations

import os

# one BLAS thread per worker process: the evaluation runs conversations in parallel instead
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import multiprocessing as mp  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections import OrderedDict, defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import structlog  # noqa: E402

from teleo_server.pipeline import PipelineSettings, make_retriever  # noqa: E402
from teleo_server.pipeline import profiles as profile_registry  # noqa: E402
from teleo_server.pipeline.types import Hit, Query  # noqa: E402
from teleo_server.pipeline_settings import BUILTIN_PROFILES, ProfileSpec  # noqa: E402
from teleo_server.entities import keys as entity_keys  # noqa: E402
from teleo_server.spaces.graph import GraphSettings  # noqa: E402

from bench.eval.corpora import Prepared, load_all  # noqa: E402
from bench.eval.metrics import recall_at  # noqa: E402
from bench.eval.run import PRINCIPAL, REPO, Run, environment, evaluate  # noqa: E402

log = structlog.get_logger(__name__)

GRAPH = "E8_graph"
CATS = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial", "all")
FLOORS = (0.0, 0.01, 0.02, 0.05, 0.1)
# E8_graph settings that change how the graph is built (need an index of their own); the rest
# of GraphSettings only parameterise the walk
INDEX_KEYS = ("session_weight", "link_weight", "max_entities")
GRAPH_KNOBS = ("alpha", "hops", "hub_fraction", "max_nodes", "session_weight", "link_weight", "max_entities")
TELEO_WEIGHTS = {"E1_semantic": 0.5, "E6_lexical": 1.0, "E13_splade": 1.0, "E9_hdc": 0.3}
NO_TIME_LIMITS = {"vector": 0.0, "bm25": 0.0, "splade": 0.0, "graph": 0.0}
HIPPO = BUILTIN_PROFILES["hipporag"]
# the teleological pipeline with the graph stage before fusion (the built-in ``teleological_graph``
# profile is this family at w_graph 2, graph_seeds 5; the descent starts from the first
# configuration, weight 0.5 and 10 seeds)
TG_STAGES = ("sparse_recall", "dense", "graph", "fusion", "alignment", "late_interaction", "finalize")

FAMILIES = ("teleological_graph", "hipporag")
DEFAULTS: dict[str, dict[str, Any]] = {
    "teleological_graph": {"w_graph": 0.5, "graph_seeds": 10, "graph_results": 50, "hops": 3, "session_weight": 0.5,
                           "hub_fraction": 0.05, "alpha": 0.85, "max_nodes": 2000, "mmr_lambda": 1.0},
    # hipporag's first configuration (the built-in profile has since taken tuned values: it is
    # evaluated beside as builtin:hipporag)
    "hipporag": {"splade": False, "fusion": "rrf", "late": False, "alignment": False, "w_dense": 1.0, "w_graph": 1.0,
                 "strategy_candidates": 100, "graph_seeds": 10, "graph_results": 50, "hops": 3, "session_weight": 0.5,
                 "hub_fraction": 0.05, "alpha": 0.85, "max_nodes": 2000, "mmr_lambda": 1.0, "min_relevance": 0.0,
                 "rerank_w": 0.0},
}
# the values each knob is tried at (its default among them)
AXES: dict[str, dict[str, list[Any]]] = {
    "teleological_graph": {
        "w_graph": [0.0, 0.25, 0.5, 1.0, 2.0],  # 0: the walk's memories join the pool, its scores unused
        "graph_seeds": [0, 5, 10, 20],          # 0: the walk starts from the query's entities only
        "graph_results": [50, 100],
        "hops": [1, 2, 3],
        "session_weight": [0.0, 0.5, 1.0],
        "hub_fraction": [0.05, 0.2, 1.0],       # 1.0: speaker names (on every turn) are crossed
        "alpha": [0.5, 0.85],
        "max_nodes": [2000, 5000],              # the walk's neighbourhood budget
        "mmr_lambda": [0.7, 0.85, 1.0],         # diversity in finalize (dense MMR)
    },
    "hipporag": {
        "splade": [False, True],                # SPLADE in every route
        "fusion": ["rrf", "rrf_relative_mean"],
        "late": [False, True],                  # MaxSim rerank after fusion
        "alignment": [False, True],             # goal alignment after fusion
        "w_dense": [0.5, 1.0],
        "w_graph": [0.0, 0.5, 1.0, 2.0],
        "strategy_candidates": [100, 300],
        "graph_seeds": [5, 10, 20],
        "graph_results": [50, 100],
        "hops": [1, 3],
        "session_weight": [0.0, 0.5, 1.0],
        "hub_fraction": [0.05, 1.0],
        "mmr_lambda": [0.7, 0.85, 1.0],
        "rerank_w": [0.0, 0.5, 0.8],            # validation_rerank_weight: fused score vs calibrated relevance
    },
}
# knobs whose interaction is tried as a full grid in round 2 (the others at their defaults)
GRIDS: dict[str, dict[str, list[Any]]] = {
    "teleological_graph": {"w_graph": [0.5, 1.0, 2.0], "hub_fraction": [0.05, 1.0], "graph_seeds": [0, 10, 20],
                           "session_weight": [0.5, 1.0]},
    "hipporag": {"splade": [False, True], "fusion": ["rrf", "rrf_relative_mean"], "late": [False, True],
                 "w_graph": [0.5, 1.0, 2.0], "rerank_w": [0.0, 0.8]},
}
# values past the edge of a knob's axis, tried in round 4 when the best so far sits on that edge
EXTEND: dict[str, dict[str, tuple[Any, list[Any]]]] = {
    "teleological_graph": {"w_graph": (2.0, [3.0, 4.0, 6.0]), "session_weight": (1.0, [2.0]),
                           "graph_seeds": (0, [])},
    "hipporag": {"w_graph": (2.0, [3.0, 4.0, 6.0]), "session_weight": (1.0, [2.0]), "graph_seeds": (5, [2, 3]),
                 "strategy_candidates": (300, [600])},
}
# the built-in profiles' values (as set from an earlier run of this descent), a second start
SECOND_START: dict[str, dict[str, Any]] = {
    "teleological_graph": {"w_graph": 2.0, "graph_seeds": 5},
    "hipporag": {"splade": True, "late": True, "w_graph": 2.0, "graph_seeds": 5},
}
QUICK_AXES: dict[str, dict[str, list[Any]]] = {
    "teleological_graph": {"w_graph": [0.5, 1.0, 2.0], "graph_seeds": [10, 20], "session_weight": [0.5, 1.0],
                           "hub_fraction": [0.05, 1.0]},
    "hipporag": {"splade": [False, True], "fusion": ["rrf", "rrf_relative_mean"], "late": [False, True],
                 "w_graph": [0.5, 1.0]},
}


# ---- variants ------------------------------------------------------------------------------------
def variant_name(family: str, knobs: dict[str, Any]) -> str:
    diff = {k: v for k, v in knobs.items() if DEFAULTS[family].get(k) != v}
    return family + ("" if not diff else " " + " ".join(f"{k}={v}" for k, v in sorted(diff.items())))


def materialise(family: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """A variant as data: its profile (stages, settings) and its E8_graph space settings."""
    k = {**DEFAULTS.get(family, {}), **knobs}
    graph = {g: k[g] for g in GRAPH_KNOBS if g in k}
    if family.startswith("builtin:"):  # a built-in profile as configured (time limits off)
        spec = BUILTIN_PROFILES[family.split(":", 1)[1]]
        settings = dict(spec.settings)
        if "strategies" in spec.stages:
            settings["strategy_timeout_ms"] = dict(NO_TIME_LIMITS)
        return {"family": family, "knobs": {}, "stages": list(spec.stages), "settings": settings, "graph": {}}
    if family == "teleological":
        spec = BUILTIN_PROFILES["teleological"]
        return {"family": family, "knobs": {}, "stages": list(spec.stages), "settings": dict(spec.settings), "graph": {}}
    if family == "teleological_graph":
        settings = {"space_weights": {**TELEO_WEIGHTS, GRAPH: k["w_graph"]}, "graph_seeds": k["graph_seeds"],
                    "graph_results": k["graph_results"], "mmr_lambda": k["mmr_lambda"]}
        return {"family": family, "knobs": k, "stages": list(TG_STAGES), "settings": settings, "graph": graph}
    if family == "hipporag":
        stages = (["route", "strategies", "fusion"] + (["alignment"] if k["alignment"] else [])
                  + (["late_interaction"] if k["late"] else []) + ["validate", "conflicts", "finalize"])
        settings = dict(HIPPO.settings)
        settings.update({
            "fusion": k["fusion"],
            "space_weights": {"E1_semantic": k["w_dense"], "E6_lexical": 1.0, "E13_splade": 1.0, GRAPH: k["w_graph"]},
            "strategy_candidates": k["strategy_candidates"], "graph_seeds": k["graph_seeds"],
            "graph_results": k["graph_results"], "validation_min_relevance": k["min_relevance"], "mmr_lambda": k["mmr_lambda"],
            "validation_rerank_weight": k["rerank_w"],
            "strategy_timeout_ms": dict(NO_TIME_LIMITS)})
        every = ("vector", "bm25", "splade", "graph")
        # splade False: the first configuration's routes, SPLADE on exploratory questions only
        plain = every if k["splade"] else ("vector", "bm25", "graph")
        settings["routes"] = {"simple": plain, "multi_hop": plain, "exploratory": every}
        return {"family": family, "knobs": k, "stages": stages, "settings": settings, "graph": graph}
    raise ValueError(family)


def index_key(v: dict[str, Any]) -> str:
    g = GraphSettings(**v["graph"])
    return json.dumps({key: getattr(g, key) for key in INDEX_KEYS}, sort_keys=True)


# ---- worker side ---------------------------------------------------------------------------------
_CONVS: list[Prepared] = []
_MEMO = True  # memoise MaxSim per (query, chunk): exact, and the evaluation's main cost
_BUILT: OrderedDict[tuple[int, str], Any] = OrderedDict()
_MEMOS: dict[int, dict] = {}  # conversation -> MaxSim memo (shared by its indexes: same chunks, same rows)
_BUILD_S: dict[str, float] = defaultdict(float)


def _retriever(ci: int, v: dict[str, Any]) -> Any:
    """The conversation's retriever for this variant's index-time graph settings (built once, a few
    kept), with the variant's walk settings set and the variant registered as a profile."""
    key = (ci, index_key(v))
    r = _BUILT.get(key)
    if r is None:
        t0 = time.perf_counter()
        base = PipelineSettings().updated({"spaces": {GRAPH: json.loads(key[1])}})
        r = make_retriever(base, "numpy")
        for m, e in _CONVS[ci].items:
            r.add(m, e)
        r.maintain()
        if _MEMO:
            r.ops = MemoOps(r.ops, _MEMOS.setdefault(ci, {}))
        _BUILD_S[key[1]] += time.perf_counter() - t0
        _BUILT[key] = r
        while len(_BUILT) > 8:
            _BUILT.popitem(last=False)
    _BUILT.move_to_end(key)
    set_walk(r, v["graph"])
    spec = ProfileSpec(stages=tuple(v["stages"]), settings=v["settings"])
    settings = r.settings.updated({"profiles": {"variant": spec}})
    profile_registry.check(settings)
    r.settings = settings
    return r


class MemoOps:
    """A backend's ops with MaxSim memoised per query (its token matrix) and chunk row.

    MaxSim of a chunk depends only on the query's tokens and the chunk's, and a built index does
    not change here, so every variant after the first pays only for chunks it has not scored yet.
    Used by the late-interaction rerank and the validation's relevance signals alike."""

    def __init__(self, ops: Any, memo: dict) -> None:
        self._ops = ops
        self._memo: dict[tuple[tuple[int, ...], bytes], dict[int, float]] = memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ops, name)

    def _memoised(self, score: Any, query_tokens: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(query_tokens)
        known = self._memo.setdefault((q.shape, q.tobytes()), {})
        cand = np.asarray(candidates).ravel()
        missing = np.array(sorted({int(c) for c in cand.tolist()} - known.keys()), dtype=cand.dtype)
        if missing.size:
            known.update(zip(missing.tolist(), score(missing).tolist()))
        return np.array([known[int(c)] for c in cand.tolist()], dtype=np.float32)

    def maxsim(self, query_tokens: np.ndarray, doc_offsets: np.ndarray, doc_tokens: np.ndarray,
               candidates: np.ndarray) -> np.ndarray:
        return self._memoised(lambda c: self._ops.maxsim(query_tokens, doc_offsets, doc_tokens, c), query_tokens,
                              candidates)

    def maxsim_codes(self, query_tokens: np.ndarray, doc_offsets: np.ndarray, codes: np.ndarray, bits: int,
                     levels: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        return self._memoised(lambda c: self._ops.maxsim_codes(query_tokens, doc_offsets, codes, bits, levels, c),
                              query_tokens, candidates)


def set_walk(r: Any, graph: dict[str, Any]) -> None:
    """Query-time walk settings on a built graph space (index-time ones must match the build)."""
    space = r.spaces[GRAPH]
    cfg = GraphSettings(**graph)
    for key in INDEX_KEYS:
        assert getattr(cfg, key) == getattr(space.config, key), (key, graph)
    space.config = cfg
    space._walk = cfg.walk()


def _work(task: tuple[int, list[dict[str, Any]], list[str]]) -> dict[str, Any]:
    ci, variants, probes = task
    p = _CONVS[ci]
    out: dict[str, Any] = {"conv": p.name, "results": {}, "probes": {}}
    order = sorted(range(len(variants)), key=lambda i: index_key(variants[i]))  # fewest rebuilds
    for i in order:
        v = variants[i]
        r = _retriever(ci, v)
        out["results"][v["name"]] = evaluate(r, p, "dev", Run(v["name"], "variant"))
        if v["name"] in probes:
            out["probes"][v["name"]] = floor_probe(r, p)
    out["build_s"] = dict(_BUILD_S)
    return out


def floor_probe(r: Any, p: Prepared) -> list[dict[str, Any]]:
    """Per question: the delivered results (up to validation depth) with their calibrated relevance."""
    rows = []
    for q, emb in p.queries["dev"]:
        query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=100, profile="variant", now=2.0e9)
        hits = [e for e in r.retrieve(query) if isinstance(e, Hit)]
        rows.append({"cat": q.category, "relevant": sorted(q.relevant), "ids": [h.memory.id for h in hits],
                     "rel": [round(float(h.relevance), 5) for h in hits]})
    return rows


# ---- parent side ---------------------------------------------------------------------------------
class Evaluator:
    def __init__(self, convs: list[Prepared], workers: int, checkpoint: Path | None = None, code: str = "") -> None:
        self.convs = convs
        self.done: dict[str, dict[str, Any]] = {}
        self.probes: dict[str, list[dict[str, Any]]] = {}
        self.build_s: dict[str, float] = defaultdict(float)
        self.pool = mp.get_context("fork").Pool(workers) if workers > 1 else None
        self.checkpoint, self.code = checkpoint, code

    def resume(self) -> None:
        """The variants a killed run of the same code had finished (its checkpoint)."""
        if self.checkpoint is None or not self.checkpoint.is_file():
            return
        saved = json.loads(self.checkpoint.read_text())
        if saved.get("code_sha256") != self.code:
            log.warning("checkpoint_ignored", reason="other code", path=str(self.checkpoint))
            return
        self.done.update(saved["variants"])
        log.info("resumed", variants=len(self.done))

    def _save(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            self.checkpoint.write_text(json.dumps({"code_sha256": self.code, "variants": self.done}))

    def run(self, variants: list[dict[str, Any]], probes: tuple[str, ...] = (), label: str = "", chunk: int = 8) -> None:
        todo = [v for v in variants if v["name"] not in self.done]
        todo = list({v["name"]: v for v in todo}.values())
        probes = tuple(n for n in probes if n not in self.probes)
        if not todo and not probes:
            return
        t0 = time.perf_counter()
        n_todo = len(todo)
        if probes:  # a probed variant is evaluated again alongside its probe (cheap next to the probe)
            todo += [v for v in variants if v["name"] in probes and v["name"] in self.done]
        while todo:
            part = todo[:chunk] if not probes else todo
            todo = todo[len(part):]
            # the conversations with the most questions first, so two workers finish together
            tasks = sorted(((ci, part, list(probes)) for ci in range(len(self.convs))),
                           key=lambda t: -len(self.convs[t[0]].queries["dev"]))
            outs = self.pool.map(_work, tasks, chunksize=1) if self.pool else [_work(t) for t in tasks]
            for v in part:
                res = [o["results"][v["name"]] for o in outs]
                self.done[v["name"]] = {**v, **aggregate(res),
                                        "per_conversation": {o["conv"]: {c: round(o["results"][v["name"]][c]["recall@10"], 4)
                                                                         for c in ("all", "multi-hop") if c in o["results"][v["name"]]}
                                                             for o in outs}}
                log.info("variant", name=v["name"], **{c: self.done[v["name"]]["locomo"][c]["recall@10"]
                                                     for c in ("all", "multi-hop")}, J=self.done[v["name"]]["objective"])
            for name in probes:
                self.probes[name] = [row for o in outs for row in o["probes"][name]]
            probes = ()
            for o in outs:
                for k, s in o["build_s"].items():
                    self.build_s[k] = max(self.build_s[k], s)
            self._save()
        log.info("tune_graph_round", label=label, variants=n_todo, seconds=round(time.perf_counter() - t0, 1))

    def close(self) -> None:
        if self.pool:
            self.pool.close()
            self.pool.join()


def aggregate(per_conv: list[dict[str, Any]]) -> dict[str, Any]:
    cats: dict[str, list[dict[str, float]]] = defaultdict(list)
    lat = []
    for res in per_conv:
        lat.append(res["latency_ms_p50"])
        for cat, v in res.items():
            if isinstance(v, dict) and "n" in v:  # categories (not the perspective metrics)
                cats[cat].append(v)
    out = {}
    for cat, vals in cats.items():
        n = sum(v["n"] for v in vals)
        out[cat] = {"n": n, **{m: round(sum(v[m] * v["n"] for v in vals) / n, 4)
                               for m in ("recall@5", "recall@10", "ndcg@10", "recall@100")}}
    return {"locomo": out, "objective": round((out["all"]["recall@10"] + out["multi-hop"]["recall@10"]) / 2, 4),
            "latency_ms_p50_median_over_conversations": round(float(np.median(lat)), 1)}


def make(family: str, knobs: dict[str, Any]) -> dict[str, Any]:
    full = {**DEFAULTS.get(family, {}), **knobs}
    v = materialise(family, full)
    v["name"] = variant_name(family, full) if family in DEFAULTS else family
    return v


def neighbours(family: str, centre: dict[str, Any], axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    out = [make(family, centre)]
    for knob, values in axes.items():
        for val in values:
            if centre.get(knob, DEFAULTS[family].get(knob)) != val:
                out.append(make(family, {**centre, knob: val}))
    return out


def grid(family: str, axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(axes)
    return [make(family, dict(zip(keys, values))) for values in itertools.product(*axes.values())]


def J(ev: Evaluator, v: dict[str, Any]) -> float:
    return ev.done[v["name"]]["objective"]


def combine(ev: Evaluator, family: str, centre: dict[str, Any], axes: dict[str, list[Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The best value of every knob that beat the centre, together; and that combination with each
    of them back at the centre's value."""
    base = J(ev, make(family, centre))
    gains = {}
    for knob, values in axes.items():
        scored = [(J(ev, make(family, {**centre, knob: val})), val) for val in values]
        best_j, best_v = max(scored, key=lambda t: t[0])
        if best_j > base + 1e-4 and best_v != centre.get(knob):
            gains[knob] = best_v
    combo = {**centre, **gains}
    variants = [make(family, combo)]
    if len(gains) > 1:
        variants += [make(family, {**combo, knob: centre[knob]}) for knob in gains]
    return combo, variants


def best_of(ev: Evaluator, family: str, floor_all: float | None = None) -> dict[str, Any] | None:
    rows = [v for v in ev.done.values() if v["family"] == family and v["knobs"].get("min_relevance", 0.0) == 0.0]
    if floor_all is not None:
        rows = [v for v in rows if v["locomo"]["all"]["recall@10"] >= floor_all - 1e-9]
        return max(rows, key=lambda v: (v["locomo"]["multi-hop"]["recall@10"], v["locomo"]["all"]["recall@10"]), default=None)
    return max(rows, key=lambda v: v["objective"], default=None)


def floor_table(probe: list[dict[str, Any]], recall_by_floor: dict[float, dict[str, Any]]) -> list[dict[str, Any]]:
    """What each relevance floor removes, computed on the floor-0 results (each result carries its
    calibrated relevance), beside the Recall@10 of a run with that floor."""
    out = []
    for f in FLOORS:
        rel_top = kept_rel_top = top = removed_top = alln = removed_all = empty = short = 0
        sim_r10 = []
        for row in probe:
            relevant = set(row["relevant"])
            ids, rel = row["ids"], row["rel"]
            for i, (d, s) in enumerate(zip(ids, rel)):
                alln += 1
                removed_all += s < f
                if i < 10:
                    top += 1
                    removed_top += s < f
                    if d in relevant:
                        rel_top += 1
                        kept_rel_top += s >= f
            kept = [d for d, s in zip(ids, rel) if s >= f]
            empty += not kept
            short += len(kept) < 10
            sim_r10.append(recall_at(kept, {d: 1.0 for d in relevant}, 10))
        run = recall_by_floor.get(f, {})
        out.append({
            "min_relevance": f,
            "relevant_in_top10_kept": round(kept_rel_top / rel_top, 4) if rel_top else None,
            "top10_removed": round(removed_top / top, 4) if top else None,
            "all_results_removed": round(removed_all / alln, 4) if alln else None,
            "irrelevant_in_top10_removed": round((removed_top - (rel_top - kept_rel_top)) / max(top - rel_top, 1), 4),
            "questions_left_empty": empty, "questions_with_fewer_than_10": short,
            "recall@10_filtered_floor0_list": round(float(np.mean(sim_r10)), 4),
            "recall@10": run.get("all", {}).get("recall@10"),
            "recall@10_multi_hop": run.get("multi-hop", {}).get("recall@10"),
            "ndcg@10": run.get("all", {}).get("ndcg@10"),
        })
    return out


def scifact_check(data: Path, cache: Path, variants: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """nDCG@10 and Recall@100 of a few variants on a seeded sample of SciFact train (a sanity check
    that the LoCoMo-tuned graph settings do not hurt another domain)."""
    _BUILT.clear()
    _MEMOS.clear()
    sci = load_all(data, cache, 2, ("scifact",))["scifact"][0]
    train = sci.queries["train"]
    if len(train) > n:
        pick = np.random.default_rng(0).choice(len(train), size=n, replace=False)
        sci.queries["train"] = [train[i] for i in sorted(pick)]
    global _CONVS
    _CONVS = [sci]
    out = {}
    for v in variants:
        r = _retriever(0, v)
        res = evaluate(r, sci, "train", Run(v["name"], "variant"))["all"]
        out[v["name"]] = {k: round(res[k], 4) for k in ("n", "ndcg@10", "recall@100")}
        log.info("scifact_train", name=v["name"], **out[v["name"]])
    _BUILT.clear()
    return out


def check_walk_swap(convs: list[Prepared]) -> dict[str, Any]:
    """A walk setting set on a built index ranks exactly as an index built with it."""
    global _CONVS
    _CONVS = convs[:1]
    v = make("teleological_graph", {"hops": 1, "hub_fraction": 1.0, "alpha": 0.5, "w_graph": 2.0})
    swapped = _retriever(0, make("teleological_graph", {}))
    swapped = _retriever(0, v)
    fresh = make_retriever(PipelineSettings().updated({"spaces": {GRAPH: v["graph"]}}), "numpy")
    for m, e in convs[0].items:
        fresh.add(m, e)
    fresh.maintain()
    fresh.settings = swapped.settings
    same = 0
    qs = convs[0].queries["dev"][:60]
    for q, emb in qs:
        ids = []
        for r in (swapped, fresh):
            query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=20, profile="variant", now=2.0e9)
            ids.append([e.memory.id for e in r.retrieve(query) if isinstance(e, Hit)])
        same += ids[0] == ids[1]
    _BUILT.clear()
    _MEMOS.clear()
    return {"variant": v["name"], "questions": len(qs), "identical_top20": same}


def _speaker(text: str) -> str:
    return text.split(":", 1)[0].strip() if ":" in text[:40] else ""


def _named(speakers: set[str], question: str) -> set[str]:
    return {s for s in speakers if s and re.search(rf"\b{re.escape(s)}\b", question, re.IGNORECASE)}


def structure(convs: list[Prepared]) -> dict[str, Any]:
    """How the evidence of each question category sits in the memory graph (no retrieval): whether
    the walk can reach it. Hubs as the walk counts them by default (hub_fraction 0.05, hub_min 50)."""
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in convs:
        text = {m.id: m.content for m, _ in p.items}
        ents = {i: set(entity_keys(t, 64)) for i, t in text.items()}
        pos = {m.id: (m.session_id, m.session_position) for m, _ in p.items}
        deg: dict[str, int] = defaultdict(int)
        for e in ents.values():
            for k in e:
                deg[k] += 1
        hub = {k for k, d in deg.items() if d > max(0.05 * len(text), 50)}
        speakers = {_speaker(t) for t in text.values()}
        for q, _ in p.queries["dev"]:
            a = acc[q.category or "all"]
            ev = [d for d in q.relevant if d in text]
            q_ents = set(entity_keys(q.text, 64))
            named = _named(speakers, q.text)
            a["questions"] += 1
            a["evidence"] += len(ev)
            a["sessions"] += len({pos[d][0] for d in ev})
            a["multi_evidence"] += len(ev) > 1
            for d in ev:
                others = [o for o in ev if o != d]
                a["speaker_named"] += _speaker(text[d]) in named
                a["query_entity"] += bool(ents[d] & q_ents)
                a["query_non_hub_entity"] += bool((ents[d] - hub) & q_ents)
                a["only_hub_entities"] += not (ents[d] - hub)
                a["non_hub_entity_with_other_evidence"] += any((ents[d] - hub) & ents[o] for o in others)
                a["same_session_within_2_of_other_evidence"] += any(
                    pos[o][0] == pos[d][0] and abs((pos[o][1] or 0) - (pos[d][1] or 0)) <= 2 for o in others)
    out = {}
    for cat, a in acc.items():
        n, e = a["questions"], max(a["evidence"], 1)
        out[cat] = {"questions": int(n), "evidence_per_question": round(a["evidence"] / n, 2),
                    "sessions_per_question": round(a["sessions"] / n, 2),
                    "questions_with_several_evidence_turns": round(a["multi_evidence"] / n, 3),
                    **{f"evidence_{k}": round(a[k] / e, 3) for k in (
                        "speaker_named", "query_entity", "query_non_hub_entity", "only_hub_entities",
                        "non_hub_entity_with_other_evidence", "same_session_within_2_of_other_evidence")}}
    return out


def _session_cap(ids: list[str], session: dict[str, str], cap: int) -> list[str]:
    """At most ``cap`` results per session first (order kept), then the rest."""
    seen: dict[str, int] = defaultdict(int)
    head, tail = [], []
    for d in ids:
        seen[session[d]] += 1
        (head if seen[session[d]] <= cap else tail).append(d)
    return head + tail


def speaker_first(convs: list[Prepared], variants: list[dict[str, Any]]) -> dict[str, Any]:
    """Ideas that need code, estimated by reordering each variant's top 100 (Recall@10 per category):
    ``speaker_first``, when a question names a speaker, that speaker's turns first (order kept);
    ``session_cap_2``, at most two results per session ahead of the rest (evidence of a multi-hop
    question spans sessions); and both."""
    global _CONVS
    _CONVS = convs
    _BUILT.clear()
    _MEMOS.clear()
    kinds = ("as_is", "speaker_first", "session_cap_2", "speaker_first+session_cap_2")
    out = {}
    for v in variants:
        per: dict[str, list[tuple[float, ...]]] = defaultdict(list)
        for ci, p in enumerate(convs):
            r = _retriever(ci, v)
            text = {m.id: m.content for m, _ in p.items}
            session = {m.id: m.session_id or m.id for m, _ in p.items}
            speakers = {_speaker(t) for t in text.values()}
            for q, emb in p.queries["dev"]:
                query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=100, profile="variant", now=2.0e9)
                ids = [e.memory.id for e in r.retrieve(query) if isinstance(e, Hit)]
                named = _named(speakers, q.text)
                first = ([d for d in ids if _speaker(text[d]) in named] + [d for d in ids if _speaker(text[d]) not in named]
                         if named else ids)
                lists = (ids, first, _session_cap(ids, session, 2), _session_cap(first, session, 2))
                m = tuple(recall_at(x, q.relevant, 10) for x in lists)
                per[q.category or "all"].append(m)
                per["all"].append(m)
        out[v["name"]] = {cat: {"n": len(vals), **{f"recall@10_{k}": round(float(np.mean([x[i] for x in vals])), 4)
                                                   for i, k in enumerate(kinds)}}
                          for cat, vals in per.items()}
        log.info("reorder_estimate", name=v["name"], **{f"{c}:{k}": out[v["name"]][c][f"recall@10_{k}"]
                                                         for c in ("all", "multi-hop") for k in kinds})
    _BUILT.clear()
    _MEMOS.clear()
    return out


def diagnose(convs: list[Prepared], res: dict[str, Any]) -> dict[str, Any]:
    picks = [make("teleological", {}), make("teleological_graph", {})]
    done = res.get("variants", {})
    for fam in FAMILIES:
        for key in ("best_objective", "best_within_constraint", "best_with_w_graph_at_most_1"):
            name = res.get("best", {}).get(fam, {}).get(key)
            if name and name in done:
                picks.append({"name": name, **{k: done[name][k] for k in ("family", "knobs", "stages", "settings", "graph")}})
    picks = list({v["name"]: v for v in picks}.values())
    return {"evidence_structure": structure(convs), "reorder_estimates": speaker_first(convs, picks)}


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'variant':<78} {'J':>6} " + " ".join(f"{c[:10]:>10}" for c in CATS) + "  (R@10; all: R@5/R@10/nDCG@10)"
    lines = [head]
    for v in rows:
        loc = v["locomo"]
        cells = [f"{loc[c]['recall@10']:>10.3f}" if c in loc else f"{'-':>10}" for c in CATS[:-1]]
        a = loc["all"]
        lines.append(f"{v['name'][:78]:<78} {v['objective']:>6.3f} " + " ".join(cells)
                     + f"  {a['recall@5']:.3f}/{a['recall@10']:.3f}/{a['ndcg@10']:.3f}")
    return "\n".join(lines)


def code_state(git_repo: Path) -> dict[str, Any]:
    """The code measured: a hash of the server and evaluation sources this process runs, and the git
    commit and uncommitted files of ``git_repo`` (the checkout they came from) at the start."""
    h = hashlib.sha256()
    for f in sorted([*(REPO / "teleo_server").rglob("*.py"), *(REPO / "teleo_server").rglob("*.json"),
                     *(REPO / "bench" / "eval").glob("*.py")]):
        if f.name == "tune_graph.py":
            continue
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
    out: dict[str, Any] = {"code_sha256": h.hexdigest()[:16], "code_root": REPO.name}
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=git_repo, capture_output=True, text=True).stdout  # noqa: E731
        out["source_commit"] = run("rev-parse", "--short", "HEAD").strip()
        out["source_uncommitted"] = [line[3:] for line in run("status", "--porcelain").splitlines() if line.strip()]
    except OSError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tuning_graph.json")
    ap.add_argument("--workers", type=int, default=2, help="processes evaluating conversations in parallel")
    ap.add_argument("--quick", action="store_true", help="fewer knobs and no third round")
    ap.add_argument("--conversations", type=int, default=0, help="only the first N dev conversations (smoke test)")
    ap.add_argument("--scifact-train", type=int, default=300, help="SciFact train questions for the final check (0: none)")
    ap.add_argument("--diagnose-only", action="store_true",
                    help="only add the multi-hop diagnostic to an existing --out file (its best variants)")
    ap.add_argument("--git-repo", type=Path, default=REPO, help="checkout whose commit is recorded (when run from a copy)")
    ap.add_argument("--resume", action="store_true",
                    help="take the variants a killed run of the same code finished as evaluated (its checkpoint, "
                         "--checkpoint, written after every few variants)")
    ap.add_argument("--checkpoint", type=Path, default=REPO / "var" / "eval" / "tune_graph.partial.json")
    ap.add_argument("--no-memo", action="store_true", help="compute MaxSim afresh for every variant")
    ap.add_argument("--check-walk-swap", action="store_true", help="also verify query-time walk settings against a rebuild")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    global _CONVS, _MEMO
    _MEMO = not args.no_memo
    convs = load_all(args.data, args.cache, 2, ("locomo",))["locomo"]
    if args.conversations:
        convs = convs[: args.conversations]
    if args.diagnose_only:
        res = json.loads(args.out.read_text())
        res["multi_hop_diagnostic"] = diagnose(convs, res)
        args.out.write_text(json.dumps(res, indent=2))
        print(json.dumps(res["multi_hop_diagnostic"], indent=2))  # noqa: T201
        return 0
    res: dict[str, Any] = {
        "environment": {**environment(), **code_state(args.git_repo), "workers": args.workers},
        "data": f"LoCoMo dev: {len(convs)} conversations, {sum(len(p.queries['dev']) for p in convs)} questions "
                "(evidence turns relevant); SciFact train sample for the final check; SciFact test never read",
        "method": __doc__.split("\n\n")[1].strip(),
        "objective": "J = (Recall@10 all + Recall@10 multi-hop) / 2; 'best within constraint' = highest multi-hop "
                     "Recall@10 among variants whose overall Recall@10 >= teleological's",
        "defaults": DEFAULTS,
    }
    if args.check_walk_swap:
        res["walk_swap_check"] = check_walk_swap(convs)
        log.info("walk_swap_check", **res["walk_swap_check"])
    _CONVS = convs
    ev = Evaluator(convs, args.workers, args.checkpoint, res["environment"]["code_sha256"])
    if args.resume:
        ev.resume()
    axes = QUICK_AXES if args.quick else AXES
    rounds: list[dict[str, Any]] = []
    try:
        # round 1: the references, and each knob alone from the defaults
        r1 = [make("teleological", {})] + [make(f"builtin:{n}", {}) for n in ("teleological_graph", "hipporag")
                                           if n in BUILTIN_PROFILES]
        for fam in FAMILIES:
            r1 += neighbours(fam, {}, axes[fam])
        ev.run(r1, label="round 1")
        rounds.append({"round": 1, "what": "each knob alone from the defaults", "variants": [v["name"] for v in r1]})
        # round 2: the helpful knobs combined, and the combination with each put back
        centres: dict[str, dict[str, Any]] = {}
        r2 = []
        for fam in FAMILIES:
            combo, vs = combine(ev, fam, dict(DEFAULTS[fam]), axes[fam])
            centres[fam] = combo
            r2 += vs
            if not args.quick:
                r2 += grid(fam, GRIDS[fam])
        ev.run(r2, label="round 2")
        rounds.append({"round": 2, "what": "helpful knobs combined, each put back; and a grid of the knobs that may "
                       "interact", "grids": GRIDS if not args.quick else {}, "variants": [v["name"] for v in r2]})
        # round 3: each knob alone again, from the best so far
        if not args.quick:
            r3 = []
            for fam in FAMILIES:
                best = best_of(ev, fam)
                centres[fam] = dict(best["knobs"])
                r3 += neighbours(fam, centres[fam], axes[fam])
            ev.run(r3, label="round 3")
            rounds.append({"round": 3, "what": "each knob alone from the best so far", "variants": [v["name"] for v in r3]})
            # round 4: past the edge of an axis the best sits on; then each knob alone around a new best
            r4, wider, before = [], {}, {}

            def refine(n: int, before: dict[str, dict[str, Any]]) -> None:
                """Round ``n``: each knob alone around each family's best, where it moved in round n - 1."""
                vs = []
                for fam in FAMILIES:
                    best = best_of(ev, fam)
                    if best["knobs"] != before[fam]:
                        vs += neighbours(fam, dict(best["knobs"]), wider[fam])
                if vs:
                    ev.run(vs, label=f"round {n}")
                    rounds.append({"round": n, "what": f"each knob alone around the best after round {n - 1}",
                                   "variants": [v["name"] for v in vs]})

            for fam in FAMILIES:
                best = best_of(ev, fam)
                before[fam] = dict(best["knobs"])
                wider[fam] = {k: list(vals) for k, vals in axes[fam].items()}
                for knob, (edge, extra) in EXTEND[fam].items():
                    if best["knobs"].get(knob) == edge and extra:
                        wider[fam][knob] = sorted(set(wider[fam][knob]) | set(extra))
                        r4 += [make(fam, {**best["knobs"], knob: val}) for val in extra]
            if r4:
                ev.run(r4, label="round 4")
                rounds.append({"round": 4, "what": "past the edge of an axis the best sat on", "variants": [v["name"] for v in r4]})
                refine(5, before)
            # rounds 6 and 7: a second start, the built-in profile as configured now (chosen from an
            # earlier run of this descent), in case the descent above ended in another local optimum
            r6, before = [], {}
            for fam in FAMILIES:
                before[fam] = dict(best_of(ev, fam)["knobs"])
                start = {**DEFAULTS[fam], **SECOND_START.get(fam, {})}
                r6 += neighbours(fam, start, wider[fam])
            ev.run(r6, label="round 6")
            rounds.append({"round": 6, "what": "each knob alone around a second start (the built-in profile's values)",
                           "starts": SECOND_START, "variants": [v["name"] for v in r6]})
            refine(7, before)
        res["rounds"] = rounds
        teleo_all = ev.done["teleological"]["locomo"]["all"]["recall@10"]
        best = {}
        for fam in FAMILIES:
            b, bc = best_of(ev, fam), best_of(ev, fam, floor_all=teleo_all)
            modest = max((v for v in ev.done.values() if v["family"] == fam and v["knobs"].get("w_graph", 0) <= 1.0
                          and v["knobs"].get("min_relevance", 0.0) == 0.0), key=lambda v: v["objective"])
            best[fam] = {"best_objective": b["name"], "best_within_constraint": bc["name"] if bc else None,
                         "best_with_w_graph_at_most_1": modest["name"],
                         "knobs": b["knobs"], "stages": b["stages"], "settings": b["settings"], "graph": b["graph"],
                         "locomo": b["locomo"]}
        res["best"] = best
        # the relevance floor of hipporag, default and tuned
        floors: dict[str, Any] = {}
        tuned = ev.done[best["hipporag"]["best_objective"]]["knobs"]
        for label, knobs in (("hipporag (first configuration)", dict(DEFAULTS["hipporag"])),
                             ("hipporag (built-in profile now)", {**DEFAULTS["hipporag"], **SECOND_START["hipporag"]}),
                             ("hipporag (tuned)", dict(tuned))):
            vs = [make("hipporag", {**knobs, "min_relevance": f}) for f in FLOORS]
            ev.run(vs, probes=(vs[0]["name"],), label=f"floors {label}")
            floors[label] = {"variant": vs[0]["name"],
                             "rows": floor_table(ev.probes[vs[0]["name"]], {f: ev.done[v["name"]]["locomo"] for f, v in zip(FLOORS, vs)})}
        res["relevance_floor"] = floors
        res["build_seconds_per_index_setting"] = {k: round(s, 1) for k, s in ev.build_s.items()}
    finally:
        ev.close()
    if args.scifact_train:
        picks = [make("teleological", {}), make("teleological_graph", {}), ev.done[best["teleological_graph"]["best_objective"]],
                 make("hipporag", {}), ev.done[best["hipporag"]["best_objective"]]]
        for fam in FAMILIES:
            for key in ("best_within_constraint", "best_with_w_graph_at_most_1"):
                name = best[fam][key]
                if name:
                    picks.append(ev.done[name])
        picks = list({v["name"]: v for v in picks}.values())
        res["scifact_train"] = scifact_check(args.data, args.cache, picks, args.scifact_train)
    res["variants"] = {name: {k: v[k] for k in ("family", "knobs", "stages", "settings", "graph", "locomo", "objective",
                                                "per_conversation", "latency_ms_p50_median_over_conversations")}
                       for name, v in ev.done.items()}
    res["multi_hop_diagnostic"] = diagnose(convs, res)
    res["seconds"] = round(time.perf_counter() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    args.checkpoint.unlink(missing_ok=True)
    # the command's report
    ordered = sorted(ev.done.values(), key=lambda v: (v["family"], -v["objective"]))
    print(table(ordered))  # noqa: T201
    print("\nbest:", json.dumps({f: {k: b[k] for k in ("best_objective", "best_within_constraint", "best_with_w_graph_at_most_1")} for f, b in best.items()}, indent=2))  # noqa: T201
    for label, f in res["relevance_floor"].items():
        print(f"\nrelevance floor, {label}")  # noqa: T201
        for row in f["rows"]:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))  # noqa: T201
    if "scifact_train" in res:
        print("\nSciFact train:", json.dumps(res["scifact_train"], indent=2))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
