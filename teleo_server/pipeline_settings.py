"""Pipeline settings: index parameters and the default stage configuration of every profile.

The server nests this model as ``settings.pipeline``; per-request ``Overrides`` are applied on top
of it by ``pipeline.state.resolve_config``. A plain configuration model that imports nothing of
Teleo but the text analyser, so the indexes and spaces that read it sit below the pipeline.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from teleo_server.analysis import Analyzer

# The fusion methods (pipeline/fusion.py documents each); API validation derives from this.
FusionMethod = Literal["rrf", "weighted", "relative", "rrf_relative_mean", "additive_rrf", "vector_text"]

# What the stages need a space for, and which space plays that part. Stages ask for a role
# (``State.role``), never for an E-name, so a deployment can point a role at another space.
DEFAULT_ROLES: dict[str, str] = {
    "dense": "E1_semantic",             # ANN search, memory vectors (goals, MMR, Compare's pool)
    "lexical": "E6_lexical",            # BM25 in sparse recall; goal labels
    "learned_sparse": "E13_splade",     # SPLADE in sparse recall
    "ngram": "E9_hdc",                  # typo-robust candidates in sparse recall
    "late_interaction": "E12_late",     # MaxSim rerank
    "graph": "E8_graph",                # the memory graph: personalised PageRank, typed links
}

# Which strategies each route of the ``route`` stage runs (``strategies`` stage); "skip" runs none.
# Every strategy on every route measured best on LoCoMo dev (leaving SPLADE out of simple questions
# cost Recall@10 0.71 -> 0.67); a deployment can narrow a route here.
DEFAULT_ROUTES: dict[str, tuple[str, ...]] = {
    "simple": ("vector", "bm25", "splade", "graph"),
    "multi_hop": ("vector", "bm25", "splade", "graph"),
    "exploratory": ("vector", "bm25", "splade", "graph"),
    "skip": (),
}


class ProfileSpec(BaseModel):
    """A retrieval profile as data: its stages in order and the pipeline settings it changes.

    In TOML::

        [pipeline.profiles.lexical_only]
        stages = ["sparse_recall", "fusion", "finalize"]
        settings = { fusion = "rrf", hdc_candidates = 0 }
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    stages: tuple[str, ...] = Field(min_length=1)
    settings: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    # the profile that runs instead when a query has no embedding (the embedder is down, or the
    # server runs without one); "" keeps these stages, which then use what they can
    without_embedding: str = ""


BUILTIN_PROFILES: dict[str, ProfileSpec] = {
    # the memory-graph walk runs for questions the analyzer reads as about entities or connections
    # (weight 2, seeded from the pool's top 5): on SciFact train nDCG@10 0.739 -> 0.745 and LoCoMo
    # dev Recall@10 0.697 -> 0.754 (multi-hop 0.414 -> 0.419) over the analyzer without it
    "teleological": ProfileSpec(
        stages=("analyze", "sparse_recall", "perspectives", "dense", "graph", "fusion", "alignment", "late_interaction",
                "finalize"),
        settings={"graph_seeds": 5},
        description="query analysis, sparse recall, the perspectives the query calls for, dense ANN, the memory "
                    "graph for entity and connection questions, multi-space fusion, goal alignment, MaxSim rerank"),
    "hybrid": ProfileSpec(
        stages=("sparse_recall", "dense", "fusion", "finalize"),
        settings={"fusion": "rrf", "space_weights": {"E1_semantic": 1.0, "E6_lexical": 1.0, "E13_splade": 1.0},
                  "hdc_candidates": 0},
        description="BM25 + SPLADE + dense, equal-weight RRF"),
    # OpenClaw's memory search: a 0.7 vector / 0.3 text merge of absolute scores, 30-day decay of
    # dated notes (a date in the source or metadata; evergreen and undated ones exempt), MMR over
    # word-set Jaccard with lambda 0.7, a 0.35 floor on that (decayed) score, which retires old dated
    # notes, and a 0.05 floor on calibrated relevance, which drops what is probably irrelevant: the
    # score floor alone keeps nonsense matches (bench/results/floors.json)
    "openclaw": ProfileSpec(
        stages=("sparse_recall", "dense", "fusion", "finalize"),
        settings={"fusion": "vector_text", "vector_weight": 0.7, "text_weight": 0.3, "sparse_weight": 0.0,
                  "hdc_candidates": 0, "max_candidates": 200, "dense_candidates": 200, "candidate_multiplier": 4,
                  "default_top_k": 6,
                  "decay_half_life_days": 30.0, "decay_clock": "dated", "mmr_lambda": 0.7, "mmr_similarity": "jaccard",
                  "min_score": 0.35, "min_relevance": 0.05},
        description="OpenClaw: 0.7 vector + 0.3 BM25, 30-day decay, Jaccard MMR, 0.35 floor on that score "
                    "and 0.05 on calibrated relevance",
        without_embedding="keywords"),
    # OpenClaw's keyword-only (FTS-only) mode, as its search flow runs it: the query's keywords each
    # searched with BM25, a memory scored by its best keyword as BM25 / (1 + BM25), the 0.35 floor,
    # the top results; no decay and no MMR. No relevance floor: without an embedding, relevance
    # rests on BM25 alone.
    "keywords": ProfileSpec(
        stages=("keywords", "finalize"),
        settings={"max_candidates": 200, "candidate_multiplier": 4, "default_top_k": 6, "decay_half_life_days": 0.0,
                  "mmr_lambda": 1.0, "min_score": 0.35, "min_relevance": 0.0},
        description="keyword-only: each extracted keyword searched with BM25, best score kept (no embedding needed)"),
    # the teleological pipeline with the memory graph: personalised PageRank from the query's
    # entities and the pool's top 5 joins the pool and is fused as a space (weight 2, with
    # graph_seeds 5, chosen on LoCoMo dev: Recall@10 0.69 -> 0.76, multi-hop 0.40 -> 0.45;
    # SciFact train nDCG@10 0.729 -> 0.726; bench/results/tuning_graph.json)
    "teleological_graph": ProfileSpec(
        stages=("sparse_recall", "dense", "graph", "fusion", "alignment", "late_interaction", "finalize"),
        settings={"space_weights": {"E1_semantic": 0.5, "E6_lexical": 1.0, "E13_splade": 1.0, "E9_hdc": 0.3, "E8_graph": 2.0},
                  "graph_seeds": 5},
        description="teleological, with the memory graph's personalised PageRank fused as a space"),
    # HippoRAG (the 3ngram design): route the query, run vector + BM25 + memory-graph PageRank as
    # strategies under time limits and circuit breakers, merge by RRF (k = 60), validate (supersession
    # and bi-temporal view, confidence, calibrated relevance), resolve conflicts, retry broader when
    # nothing good is found, and deliver with provenance
    "hipporag": ProfileSpec(
        stages=("route", "strategies", "fusion", "late_interaction", "validate", "conflicts", "finalize"),
        # chosen on LoCoMo dev (bench/results/tuning_graph.json): SPLADE as a strategy on every route,
        # the MaxSim rerank, the graph list at weight 2 seeded from the top 5 lifted Recall@10 from
        # 0.67 to about 0.75 and multi-hop from 0.31 to about 0.43
        settings={"fusion": "rrf", "rrf_k": 60.0, "hdc_candidates": 0,
                  "space_weights": {"E1_semantic": 1.0, "E6_lexical": 1.0, "E13_splade": 1.0, "E8_graph": 2.0},
                  "graph_seeds": 5, "max_attempts": 3, "feedback_weight": 0.2, "result_cache_ttl_s": 60.0,
                  # chosen on the even-numbered scenarios of the knowledge-update set; the odd ones
                  # are reported (bench/results/knowledge_update.json)
                  "implied_update_similarity": 0.75, "implied_update_ratio": 0.9, "implied_update_window": 3},
        description="router, vector + BM25 + SPLADE + memory-graph PageRank in parallel, RRF, MaxSim, "
                    "validation, conflict resolution, bounded retries, provenance"),
    "entry_point": ProfileSpec(
        stages=("entry", "fusion", "alignment", "late_interaction", "finalize"),
        description="start from the space the others corroborate most"),
}


def register_profile(name: str, spec: ProfileSpec) -> ProfileSpec:
    """Add a built-in profile (a plugin's): settings built after this offer it by ``name``."""
    if name in BUILTIN_PROFILES:
        raise ValueError(f"profile {name!r} is registered twice")
    BUILTIN_PROFILES[name] = spec
    return spec


class QueryTypeSpec(BaseModel):
    """What the query analyzer does for one kind of question: the fusion weight it gives each space
    (the larger of this and the profile's), and the multiplicative boost (``content *= 1 + b x the
    space's relative score``, over 1 + b)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: dict[str, float] = Field(default_factory=dict)
    boosts: dict[str, float] = Field(default_factory=dict)


# The query analyzer's kinds (pipeline/analyze.py) and what each turns on. Chosen on SciFact train
# and LoCoMo dev: the entity space at 0.5 (1.0 cost SciFact train 0.011), the memory graph at 2
# for entity and connection questions (only for connection questions: LoCoMo dev Recall@10 0.700
# instead of 0.754).
DEFAULT_QUERY_TYPES: dict[str, QueryTypeSpec] = {
    "general": QueryTypeSpec(),
    "causal": QueryTypeSpec(weights={"E5_causal": 1.0}),
    "code": QueryTypeSpec(weights={"E7_code": 1.0}),
    "entity": QueryTypeSpec(weights={"E11_entity": 0.5, "E8_graph": 2.0}),
    "intent": QueryTypeSpec(boosts={"E10_intent": 0.3}),
    "keyword": QueryTypeSpec(),
    "graph": QueryTypeSpec(weights={"E8_graph": 2.0}),
}

# Named search strategies (weights per space for fusion), chosen per request with
# ``overrides.search_matrix``; "custom" is the request's own ``space_weights``.
ALL_SPACES = ("E1_semantic", "E2_recency", "E3_periodicity", "E4_sequence", "E5_causal", "E6_lexical", "E7_code",
              "E8_graph", "E9_hdc", "E10_intent", "E11_entity", "E13_splade")
DEFAULT_MATRICES: dict[str, dict[str, float]] = {
    "identity": {name: 1.0 for name in ALL_SPACES},
    "semantic_focused": {"E1_semantic": 1.0, "E13_splade": 0.5, "E6_lexical": 0.25},
    "temporal_focused": {"E2_recency": 1.0, "E3_periodicity": 0.5, "E4_sequence": 0.5, "E1_semantic": 0.5,
                         "E6_lexical": 0.5},
    "causal_focused": {"E5_causal": 2.0, "E6_lexical": 1.0, "E13_splade": 0.5, "E1_semantic": 0.5},
    # chosen on the code set's dev split (bench/results/tuning_code.json): the code space as the
    # second voice beside meaning, a light MaxSim rerank (E12's weight is the rerank's share), and the
    # memory graph's walk from the top functions to those sharing their identifiers (dev nDCG@10
    # 0.590 -> 0.600; SPLADE, 0.5 before, added nothing beside it)
    "code_focused": {"E1_semantic": 2.0, "E7_code": 1.5, "E12_late": 0.3, "E8_graph": 0.5},
    "hybrid_lexical": {"E6_lexical": 1.0, "E13_splade": 1.0, "E9_hdc": 0.5, "E1_semantic": 0.5},
    "custom": {},
}


# Embedder groups: named sets of spaces a request's ``space_mask`` may name instead of spaces.
DEFAULT_GROUPS: dict[str, tuple[str, ...]] = {
    "semantic": ("E1_semantic", "E12_late"),
    "lexical": ("E6_lexical", "E9_hdc", "E13_splade"),
    "temporal": ("E2_recency", "E3_periodicity", "E4_sequence"),
    "structural": ("E5_causal", "E7_code", "E10_intent", "E11_entity"),
    "relational": ("E8_graph",),
}


class GoalSettings(BaseModel):
    """How goals emerge from stored memories (spherical k-means over sentence vectors)."""

    model_config = ConfigDict(extra="forbid")

    min_memories: int = Field(12, ge=2)        # no goals until this many memories are indexed
    max_goals: int = Field(16, ge=1)
    memories_per_goal: int = Field(40, ge=2)    # k = clamp(n / memories_per_goal, 2, max_goals)
    refresh_growth: float = Field(0.25, gt=0)   # re-cluster once the corpus grew by this fraction
    iterations: int = Field(20, ge=1)
    label_terms: int = Field(3, ge=1)
    drift_threshold: float = Field(0.15, ge=0)  # centroid movement (1 - cosine) reported as drift
    sample_size: int = Field(20_000, ge=100)    # memories clustered at most (seeded sample)
    seed: int = 0


class AnalyzerSettings(BaseModel):
    """The text analyser of the lexical spaces and of word-set similarity (``teleo_server.analysis``)."""

    model_config = ConfigDict(extra="forbid")

    # the defaults are the analyser's own (``Analyzer``)
    fold_accents: bool = Analyzer.fold_accents      # café = cafe; Arabic diacritics and alef forms folded
    # stems and stop words on since they were measured in the whole pipeline (SciFact train nDCG@10
    # 0.746 -> 0.751, LoCoMo dev Recall@10 0.757 -> 0.761 for teleological; README, "Text in every language")
    stem: bool = Analyzer.stem                      # Snowball stemming in the text's language
    drop_stopwords: bool = Analyzer.drop_stopwords  # stop words left out of the indexes (keywords always drop them)
    ascii_only: bool = Analyzer.ascii_only          # the first analyser: lower-cased [a-z0-9] runs only (for comparison)

    def build(self) -> Analyzer:
        return Analyzer(fold_accents=self.fold_accents, stem=self.stem, drop_stopwords=self.drop_stopwords,
                        ascii_only=self.ascii_only)


class PipelineSettings(BaseModel):
    """Index parameters and stage defaults. Every field is optional in the server's config."""

    model_config = ConfigDict(extra="forbid")

    default_profile: str = "teleological"
    # named profiles; configured ones are added to (or replace same-named) built-ins
    profiles: dict[str, ProfileSpec] = Field(default_factory=lambda: dict(BUILTIN_PROFILES))
    roles: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_ROLES))

    # each space's own settings, by space name; every space declares and validates them next to
    # its code (``Space.Settings``), e.g. [pipeline.spaces.E9_hdc] dim_bits = 16
    spaces: dict[str, dict[str, Any]] = Field(default_factory=dict)
    analyzer: AnalyzerSettings = Field(default_factory=AnalyzerSettings)

    # results of a query that asks for no number (top_k 0)
    default_top_k: int = Field(10, ge=1, le=1000)
    # when > 0, each recall arm (sparse, dense, keywords) fetches min(its cap, top_k x this), as
    # OpenClaw's candidateMultiplier does; 0 fetches the caps
    candidate_multiplier: int = Field(0, ge=0)

    # sparse recall: blended = (1 - w) * BM25 + w * SPLADE, each max-normalised per query
    sparse_weight: float = Field(0.5, ge=0, le=1)
    # 1,000 rather than 10,000: the same quality on SciFact train and LoCoMo dev (nDCG@10 0.746 vs
    # 0.745, Recall@100 0.951 vs 0.952; hybrid 0.716 either way) while every later stage scores a
    # tenth of the pool (100K synthetic: hybrid p50 15.6 -> 8.8 ms, teleological 33.7 -> 25.2 ms;
    # bench/results/tuning_candidates.json)
    max_candidates: int = Field(1_000, ge=1, le=100_000)
    hdc_candidates: int = Field(200, ge=0)      # E9 typo-robust candidates added to the pool
    # stage work that needs no earlier stage (the dense ANN search) starts on a second thread when
    # the retrieval starts and runs beside the stages before it (sparse recall); off: every stage's
    # work in order on the retrieval's thread (pipeline/stages.py, ``Stage.prefetch``)
    prefetch: bool = True
    # retrievals waiting for the index thread at once run as one group of at most this many, one
    # after another, with the work their stages can share done for all of them first (on a device,
    # the dense search: one scan of the rows for the group; pipeline/stages.py, ``Stage.together``;
    # the dense stage reports ``batch=``); 1: each alone. Server-wide: a request's overrides leave it
    retrieval_group: int = Field(16, ge=1, le=64)
    # a large MaxSim window (the rerank's, or single_space:E12_late's pool) is scored in two halves
    # side by side on a second thread (host backend; pipeline/rerank.py); off: the whole window on
    # the retrieval's thread
    parallel: bool = True

    # E1 dense
    dense_candidates: int = Field(300, ge=1)    # ANN neighbours over the whole corpus
    dense_dimension: int = Field(0, ge=0)       # 0 = adaptive (smallest Matryoshka dim meeting recall)
    min_recall_threshold: float = Field(0.95, gt=0, le=1)

    # fusion
    # defaults tuned on SciFact train + LoCoMo dev (bench/results/tuning.json): relative-score
    # fusion beat RRF by ~0.01 nDCG@10 on both but lost deep recall (R@100); their mean
    # (rrf_relative_mean; called additive_rrf before the seed's algorithm took that name) kept most
    # of both. MiniLM's dense space is the weakest on dialog turns.
    fusion: FusionMethod = "rrf_relative_mean"
    rrf_k: float = Field(60.0, gt=0)
    unique_boost: float = Field(0.1, ge=0, le=1)  # additive_rrf: boost of a candidate only one space found
    # vector_text: vector_weight * cosine + text_weight * BM25 / (1 + BM25), weights normalised to sum 1
    vector_weight: float = Field(0.7, ge=0)
    text_weight: float = Field(0.3, ge=0)
    space_weights: dict[str, float] = Field(
        default_factory=lambda: {"E1_semantic": 0.5, "E6_lexical": 1.0, "E13_splade": 1.0, "E9_hdc": 0.3}
    )
    purpose_weighting: float = Field(0.0, ge=0, le=1)  # fused *= (1 - p) + p * purpose_alignment
    # multiplicative boosts after fusion: content *= (1 + b * relative score of the space) / (1 + b)
    space_boosts: dict[str, float] = Field(default_factory=dict)

    # the query analyzer (pipeline/analyze.py): per kind of question, the weights and boosts it sets
    query_types: dict[str, QueryTypeSpec] = Field(default_factory=lambda: dict(DEFAULT_QUERY_TYPES))
    # named search strategies (overrides.search_matrix): fusion weights per space
    search_matrices: dict[str, dict[str, float]] = Field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_MATRICES.items()})
    # set per request from overrides.space_mask: only these spaces take part (empty = every space)
    masked_spaces: tuple[str, ...] = ()
    # embedder groups (overrides.space_mask may name a group for its spaces)
    space_groups: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_GROUPS))
    # the perspectives stage: spaces that search the corpus when weighted, and their top hits joined
    perspective_candidates: dict[str, int] = Field(
        default_factory=lambda: {"E5_causal": 50, "E7_code": 100, "E10_intent": 50, "E11_entity": 100})

    # teleological alignment
    goals: GoalSettings = Field(default_factory=GoalSettings)
    alignment_weight: float = Field(0.05, ge=0, le=1)
    misalignment_threshold: float = Field(0.3, ge=0, le=1)
    filter_misaligned: bool = False

    # late interaction (E12)
    late_interaction_weight: float = Field(0.5, ge=0, le=1)
    # 150 rather than 100: MaxSim then lifts relevant memories from fusion ranks 101-150 into a
    # top 100 (SciFact train Recall@100 0.944 -> 0.949, nDCG@10 and LoCoMo unchanged; 200 and 300
    # gained no more: bench/results/tuning_recall.json)
    rerank_depth: int = Field(150, ge=1)

    # finalize
    decay_half_life_days: float = Field(0.0, ge=0)  # 0 disables temporal decay
    # what a memory's age runs from: its event time, or (OpenClaw) a YYYY-MM-DD date in its source or
    # metadata, undated memories not decaying
    decay_clock: Literal["event_time", "dated"] = "event_time"
    mmr_lambda: float = Field(1.0, ge=0, le=1)      # 1 = relevance only
    mmr_depth: int = Field(50, ge=1)
    mmr_similarity: Literal["dense", "jaccard"] = "dense"  # memory vectors, or word-set Jaccard of the texts
    min_score: float = Field(0.0, ge=0, le=1)
    # calibrated relevance floor (pipeline/relevance.py): drops results unlikely to be relevant at all
    min_relevance: float = Field(0.0, ge=0, le=1)
    # importance prior: score *= 1 + w * (2 * importance - 1), so a memory at the default
    # importance (0.5) is unchanged, importance 1 gains up to w and importance 0 loses up to w.
    # Off by default: the evaluation sets carry no importance, so no gain could be measured there.
    importance_weight: float = Field(0.0, ge=0, le=1)

    # hipporag: routes and strategies (pipeline/strategies.py)
    routes: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_ROUTES))
    strategy_candidates: int = Field(100, ge=1, le=10_000)  # each strategy's list length
    graph_seeds: int = Field(10, ge=0, le=1000)             # top hits the graph walk starts from (besides entities)
    graph_results: int = Field(50, ge=1, le=10_000)         # memories the walk contributes
    # per-strategy time limits (ms; 0 = none); past it a strategy is abandoned and its breaker counts a failure
    strategy_timeout_ms: dict[str, float] = Field(
        default_factory=lambda: {"vector": 300.0, "bm25": 200.0, "splade": 200.0, "graph": 500.0})
    # when every strategy is past its limit, the first to answer within this is used (degraded)
    strategy_ceiling_ms: float = Field(3000.0, gt=0)
    # conflicts (pipeline/conflicts.py): an update written without a link. Among the top
    # ``implied_update_window`` candidates, memories whose dense vectors agree to at least
    # ``implied_update_similarity`` and whose scores lie within ``implied_update_ratio`` of each
    # other are read as one fact noted at different times, and the newest takes the best score
    # (nothing is hidden). 0 turns it off.
    implied_update_similarity: float = Field(0.0, ge=0, le=1)
    implied_update_ratio: float = Field(0.9, ge=0, le=1)
    implied_update_window: int = Field(3, ge=2, le=100)
    implied_update_names: bool = True  # two notes that name siblings ("Kite Pro", "Kite Team") are two facts
    # update hints (pipeline/updates.py): a Store names up to ``update_hints`` earlier memories
    # (0: none) the stored one probably updates, above these cosines of their sentence vectors
    # for a note written as a change and for a plain statement
    update_hints: int = Field(3, ge=0, le=20)
    update_hint_change_similarity: float = Field(0.4, ge=-1, le=1)
    update_hint_restated_similarity: float = Field(0.9, ge=-1, le=1)
    # validation (pipeline/validate.py)
    validation_depth: int = Field(50, ge=1)                  # candidates validated (at least top_k)
    validation_min_confidence: float = Field(0.0, ge=0, le=1)
    validation_min_relevance: float = Field(0.0, ge=0, le=1)  # calibrated relevance floor (the Self-RAG stand-in)
    # the seed's distillation fallback, a composite ranking: score = (1 - w) * fused + w * relevance,
    # each over its best in the pool (0 = the fused order stands)
    validation_rerank_weight: float = Field(0.0, ge=0, le=1)
    # bounded retries: attempts in all (1 = none) when the results are empty or their retrieval
    # confidence is below retry_confidence; the second broadens the filters, the third changes route
    max_attempts: int = Field(1, ge=1, le=3)
    retry_confidence: float = Field(0.0, ge=0, le=1)
    # feedback prior: score *= 1 + w * (helpful - misled) / (helpful + misled + 2)
    feedback_weight: float = Field(0.0, ge=0, le=1)
    # result cache: seconds an identical request from the same caller is answered from the cache
    # (teleo_server/result_cache.py; invalidated by any write the caller could see); 0 = off
    result_cache_ttl_s: float = Field(0.0, ge=0, le=3600)
    # circuit breakers (per retriever): consecutive failures that open one, seconds until it retries
    breaker_threshold: int = Field(5, ge=1)
    breaker_reset_s: float = Field(30.0, gt=0)

    # index maintenance
    compact_dead_fraction: float = Field(0.25, gt=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _merge_named(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = _nest_space_keys(dict(data))
            if "profiles" in data:
                data["profiles"] = {**BUILTIN_PROFILES, **dict(data["profiles"] or {})}
            if "roles" in data:
                data["roles"] = {**DEFAULT_ROLES, **dict(data["roles"] or {})}
            if "routes" in data:
                data["routes"] = {**DEFAULT_ROUTES, **dict(data["routes"] or {})}
            if "query_types" in data:
                data["query_types"] = {**DEFAULT_QUERY_TYPES, **dict(data["query_types"] or {})}
            if "space_groups" in data:
                data["space_groups"] = {**DEFAULT_GROUPS, **dict(data["space_groups"] or {})}
            if "search_matrices" in data:
                data["search_matrices"] = {**DEFAULT_MATRICES, **dict(data["search_matrices"] or {})}
        return data

    def updated(self, update: dict[str, Any]) -> PipelineSettings:
        """These settings with ``update`` applied and validated (flat per-space keys placed under
        their space); ``model_copy(update=...)`` would skip both."""
        return PipelineSettings.model_validate({**self.model_dump(), **update})

    def space(self, name: str) -> dict[str, Any]:
        """The settings given for one space (validated by that space's own model)."""
        return dict(self.spaces.get(name, {}))


# Keys of the flat layout before each space owned its settings: still accepted, and placed under
# their space (``hdc_dim_bits = 16`` is ``spaces.E9_hdc.dim_bits = 16``).
FLAT_SPACE_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "bm25_k1": (("E6_lexical", "k1"),),
    "bm25_b": (("E6_lexical", "b"),),
    "matryoshka_dims": (("E1_semantic", "matryoshka_dims"),),
    "matryoshka_oversample": (("E1_semantic", "matryoshka_oversample"),),
    "exact_threshold": (("E1_semantic", "exact_threshold"),),
    "hnsw_m": (("E1_semantic", "hnsw_m"),),
    "hnsw_ef_construction": (("E1_semantic", "hnsw_ef_construction"),),
    "hnsw_ef_search": (("E1_semantic", "hnsw_ef_search"),),
    "dense_values": (("E1_semantic", "values"),),
    "late_interaction_dim": (("E12_late", "dim"),),
    "late_interaction_bits": (("E12_late", "bits"),),
    "hdc_dim_bits": (("E9_hdc", "dim_bits"),),
    "hdc_ngram": (("E9_hdc", "ngram"),),
    "hdc_query_grams": (("E9_hdc", "query_grams"),),
    "hdc_max_df": (("E9_hdc", "max_df"),),
    "hdc_max_df_fraction": (("E9_hdc", "max_df_fraction"),),
    "recency_scale_days": (("E2_recency", "scale_days"),),
    "sequence_scale": (("E4_sequence", "scale"),),
    "merge_fraction": (("E6_lexical", "merge_fraction"), ("E9_hdc", "merge_fraction"),
                       ("E13_splade", "merge_fraction")),
}


def _nest_space_keys(data: dict[str, Any]) -> dict[str, Any]:
    flat = [k for k in data if k in FLAT_SPACE_KEYS]
    if not flat:
        return data
    spaces = {name: dict(v or {}) for name, v in dict(data.get("spaces") or {}).items()}
    for key in flat:
        value = data.pop(key)
        for space, field in FLAT_SPACE_KEYS[key]:
            spaces.setdefault(space, {}).setdefault(field, value)
    data["spaces"] = spaces
    return data


__all__ = ["ALL_SPACES", "AnalyzerSettings", "BUILTIN_PROFILES", "DEFAULT_GROUPS", "DEFAULT_MATRICES", "DEFAULT_QUERY_TYPES", "DEFAULT_ROLES", "DEFAULT_ROUTES", "FLAT_SPACE_KEYS", "FusionMethod", "GoalSettings", "PipelineSettings", "ProfileSpec", "QueryTypeSpec", "register_profile"]
